#include "distributed/rdzv_wire.hpp"

#include "common/error.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <netinet/in.h>
#include <poll.h>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

namespace accel::distributed::rdzv {

namespace {

constexpr char kMagic[] = "ACCELRDZV1";
static_assert(sizeof kMagic - 1 == kMagicBytes, "the magic's length");

// The store server's threads are joined at exit by StoreServer::stop_all, an atexit handler registered when the
// first server starts; OpenSSL's own handler, registered at its first use (later), would run before it and free
// its random generator while a server thread may still answer a handshake (a segfault in RAND_bytes, seen under
// accel launch before the threads were joined). Initialised without that handler, OpenSSL stays usable to the
// end. The first initialisation decides, so this runs before accel's first OpenSSL call.
void init_openssl()
{
    static const bool ok = OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr) == 1;
    if (!ok) fail(ACCEL_ERR_INTERNAL, "rendezvous: OpenSSL failed to initialise");
}

std::string hmac(const std::string &token, const char *role, const std::string &server_nonce, const std::string &client_nonce)
{
    init_openssl();
    const std::string msg = std::string(role) + server_nonce + client_nonce;
    unsigned char out[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()), reinterpret_cast<const unsigned char *>(msg.data()),
             msg.size(), out, &len) == nullptr || len != kMacBytes)
        fail(ACCEL_ERR_INTERNAL, "rendezvous: OpenSSL's HMAC-SHA256 failed");
    return std::string(reinterpret_cast<const char *>(out), len);
}

bool same(const std::string &a, const std::string &b)
{
    return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

void put_u32(std::string &out, uint32_t v)
{
    const char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
    out.append(b, 4);
}

// The arguments of a body after its first byte; nullopt (with *why) when a length runs past the end.
std::optional<Message> decode_body(const uint8_t *data, size_t size, std::string *why)
{
    if (size == 0) {
        *why = "an empty message";
        return std::nullopt;
    }
    Message m;
    m.op = data[0];
    size_t at = 1;
    while (at < size) {
        if (m.args.size() >= kMaxArgs) {
            *why = "more than " + std::to_string(kMaxArgs) + " arguments";
            return std::nullopt;
        }
        if (size - at < 4) {
            *why = "a truncated argument length";
            return std::nullopt;
        }
        const uint32_t n = frame_length(data + at);
        at += 4;
        if (n > size - at) {
            *why = "an argument of " + std::to_string(n) + " bytes past the message's end";
            return std::nullopt;
        }
        m.args.emplace_back(reinterpret_cast<const char *>(data + at), n);
        at += n;
    }
    return m;
}

} // namespace

std::optional<std::string> token_from_env()
{
    const char *v = std::getenv("ACCEL_RDZV_TOKEN");
    if (v != nullptr && *v != '\0') return std::string(v);
    const char *file = std::getenv("ACCEL_RDZV_TOKEN_FILE");
    if (file == nullptr || *file == '\0') return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    if (!in) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("ACCEL_RDZV_TOKEN_FILE: cannot read \"") + file + "\"");
    std::ostringstream s;
    s << in.rdbuf();
    std::string token = s.str();
    if (!token.empty() && token.back() == '\n') token.pop_back();
    if (!token.empty() && token.back() == '\r') token.pop_back();
    if (token.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("ACCEL_RDZV_TOKEN_FILE: \"") + file + "\" is empty");
    return token;
}

std::string random_bytes(size_t n)
{
    init_openssl();
    std::string out(n, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char *>(out.data()), static_cast<int>(n)) != 1)
        fail(ACCEL_ERR_INTERNAL, "rendezvous: OpenSSL's random generator failed");
    return out;
}

std::string hello(const std::string &server_nonce) { return std::string(kMagic, kMagicBytes) + server_nonce; }

std::optional<std::string> nonce_of_hello(const std::string &bytes)
{
    if (bytes.size() != kHelloBytes || bytes.compare(0, kMagicBytes, kMagic) != 0) return std::nullopt;
    return bytes.substr(kMagicBytes);
}

std::string proof(const std::string &token, const std::string &server_nonce, const std::string &client_nonce)
{
    return std::string(kMagic, kMagicBytes) + client_nonce + hmac(token, "client", server_nonce, client_nonce);
}

std::optional<std::string> check_proof(const std::string &token, const std::string &server_nonce, const std::string &bytes)
{
    if (bytes.size() != kProofBytes || bytes.compare(0, kMagicBytes, kMagic) != 0) return std::nullopt;
    const std::string client_nonce = bytes.substr(kMagicBytes, kNonceBytes);
    if (!same(bytes.substr(kMagicBytes + kNonceBytes), hmac(token, "client", server_nonce, client_nonce))) return std::nullopt;
    return client_nonce;
}

std::string server_proof(const std::string &token, const std::string &server_nonce, const std::string &client_nonce)
{
    return hmac(token, "server", server_nonce, client_nonce);
}

bool check_server_proof(const std::string &token, const std::string &server_nonce, const std::string &client_nonce,
                        const std::string &mac)
{
    return same(mac, server_proof(token, server_nonce, client_nonce));
}

std::string encode(const Message &m)
{
    std::string body(1, static_cast<char>(m.op));
    for (const std::string &a : m.args) {
        put_u32(body, static_cast<uint32_t>(a.size()));
        body += a;
    }
    std::string out;
    put_u32(out, static_cast<uint32_t>(body.size()));
    return out + body;
}

uint32_t frame_length(const uint8_t p[4])
{
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

std::optional<int64_t> parse_int(const std::string &s)
{
    if (s.empty() || s.size() > 20) return std::nullopt;
    for (size_t i = 0; i < s.size(); ++i)
        if (!(std::isdigit(static_cast<unsigned char>(s[i])) || (i == 0 && s[i] == '-' && s.size() > 1))) return std::nullopt;
    errno = 0;
    char *end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == ERANGE || *end != '\0') return std::nullopt;
    return static_cast<int64_t>(v);
}

std::optional<Message> decode_request(const uint8_t *data, size_t size, std::string *why)
{
    auto m = decode_body(data, size, why);
    if (!m) return std::nullopt;
    const size_t n = m->args.size();
    bool ok = false;
    switch (m->op) {
    case kSet: ok = n == 2; break;
    case kGet: ok = n == 2 && parse_int(m->args[1]).value_or(-1) >= 0; break;
    case kAdd: ok = n == 2 && parse_int(m->args[1]).has_value(); break;
    case kCheck: ok = n >= 1; break;
    case kWait: ok = n >= 2 && parse_int(m->args[0]).value_or(-1) >= 0; break;
    case kCompareSet: ok = n == 3; break;
    case kDeleteKey: ok = n == 1; break;
    case kNumKeys: ok = n == 0; break;
    default: *why = "unknown operation " + std::to_string(m->op); return std::nullopt;
    }
    if (!ok) {
        *why = "operation " + std::to_string(m->op) + " with " + std::to_string(n) + " malformed or miscounted arguments";
        return std::nullopt;
    }
    return m;
}

std::optional<Message> decode_answer(const uint8_t *data, size_t size, std::string *why)
{
    auto m = decode_body(data, size, why);
    if (m && m->op != kOk && m->op != kError) {
        *why = "an answer of unknown kind " + std::to_string(m->op);
        return std::nullopt;
    }
    return m;
}

namespace {

// Waits until `fd` is ready for `events` or the deadline passes.
bool ready(int fd, short events, Deadline deadline, bool *timed_out)
{
    for (;;) {
        int ms = -1;
        if (deadline != Deadline::max()) {
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) {
                *timed_out = true;
                return false;
            }
            ms = static_cast<int>(std::min<int64_t>(left.count(), INT_MAX));
        }
        pollfd p{fd, events, 0};
        const int r = poll(&p, 1, ms);
        if (r > 0) return true;
        if (r < 0 && errno != EINTR) return false;
    }
}

} // namespace

bool send_all(int fd, const std::string &bytes, Deadline deadline, bool *timed_out)
{
    *timed_out = false;
    size_t at = 0;
    while (at < bytes.size()) {
        if (!ready(fd, POLLOUT, deadline, timed_out)) return false;
        const ssize_t n = ::send(fd, bytes.data() + at, bytes.size() - at, MSG_NOSIGNAL);
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (n <= 0) return false;
        at += static_cast<size_t>(n);
    }
    return true;
}

bool recv_exact(int fd, std::string &out, size_t n, Deadline deadline, bool *timed_out)
{
    *timed_out = false;
    out.resize(n);
    size_t at = 0;
    while (at < n) {
        if (!ready(fd, POLLIN, deadline, timed_out)) return false;
        const ssize_t got = ::recv(fd, out.data() + at, n - at, 0);
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (got <= 0) return false;
        at += static_cast<size_t>(got);
    }
    return true;
}

std::string address_text(const void *p)
{
    const sockaddr_storage &a = *static_cast<const sockaddr_storage *>(p);
    char host[INET6_ADDRSTRLEN] = "?";
    if (a.ss_family == AF_INET) {
        const auto *v4 = reinterpret_cast<const sockaddr_in *>(&a);
        inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
        return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
    }
    if (a.ss_family == AF_INET6) {
        const auto *v6 = reinterpret_cast<const sockaddr_in6 *>(&a);
        if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) // a dual-stack listener's IPv4 peer: print it as IPv4
            inet_ntop(AF_INET, reinterpret_cast<const uint8_t *>(&v6->sin6_addr) + 12, host, sizeof host);
        else {
            inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
            return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
        }
        return std::string(host) + ":" + std::to_string(ntohs(v6->sin6_port));
    }
    return "an unknown address";
}

} // namespace accel::distributed::rdzv
