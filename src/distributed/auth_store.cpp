#include "distributed/auth_store.hpp"

#include "common/error.hpp"
#include "distributed/rdzv_wire.hpp"
#include "distributed/rendezvous.hpp"
#include "distributed/store_server.hpp"

#include <torch/version.h> // TORCH_VERSION_MAJOR: c10d::Store::clone() exists from LibTorch 2

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdexcept>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

namespace accel::distributed {

namespace {

using rdzv::Deadline;
using namespace std::chrono_literals;

Deadline deadline_after(std::chrono::milliseconds d)
{
    return d.count() <= 0 ? Deadline::max() : std::chrono::steady_clock::now() + d;
}

std::string seconds_text(std::chrono::milliseconds d) { return std::to_string(d.count() / 1000.0).substr(0, 5) + " s"; }

// A TCP connection to host:port, retried every 100 ms until `deadline` (the host may not listen yet, as with
// TCPStore's clients); -1 with *why after it.
int dial(const std::string &host, int port, Deadline deadline, std::string *why)
{
    for (;;) {
        addrinfo hints{}, *found = nullptr;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
        if (rc != 0) *why = gai_strerror(rc);
        for (addrinfo *a = found; a != nullptr; a = a->ai_next) {
            const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
            if (fd < 0) continue;
            if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
                freeaddrinfo(found);
                const int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                return fd;
            }
            *why = std::strerror(errno);
            close(fd);
        }
        if (found != nullptr) freeaddrinfo(found);
        if (std::chrono::steady_clock::now() + 100ms >= deadline) return -1;
        std::this_thread::sleep_for(100ms);
    }
}

int open_proven(const Rendezvous &r, const std::string &token, std::chrono::milliseconds timeout);

class AuthStore : public c10d::Store {
public:
    AuthStore(std::shared_ptr<rdzv::StoreServer> server, int fd, Rendezvous r, std::string token,
              std::chrono::milliseconds timeout)
        : c10d::Store(timeout), server_(std::move(server)), fd_(fd), where_(r.describe()), r_(std::move(r)),
          token_(std::move(token))
    {
    }
#if TORCH_VERSION_MAJOR >= 2
    // LibTorch 2's stores can be cloned (for a thread of its own): another connection, proven again, to the same
    // store; the host, if this process has it, lives while either does.
    c10::intrusive_ptr<c10d::Store> clone() override
    {
        return c10::make_intrusive<AuthStore>(server_, open_proven(r_, token_, timeout_), r_, token_, timeout_);
    }
#endif
    ~AuthStore() override { close(fd_); } // then server_ (declared first) stops, when this store hosted it

    void set(const std::string &key, const std::vector<uint8_t> &value) override { call(rdzv::kSet, {key, text(value)}); }

    std::vector<uint8_t> get(const std::string &key) override
    {
        return bytes(call(rdzv::kGet, {key, std::to_string(timeout_.count())}, timeout_).at(0));
    }

    std::vector<uint8_t> compareSet(const std::string &key, const std::vector<uint8_t> &expected,
                                    const std::vector<uint8_t> &desired) override
    {
        return bytes(call(rdzv::kCompareSet, {key, text(expected), text(desired)}).at(0));
    }

    int64_t add(const std::string &key, int64_t value) override
    {
        return rdzv::parse_int(call(rdzv::kAdd, {key, std::to_string(value)}).at(0)).value_or(0);
    }

    bool deleteKey(const std::string &key) override { return call(rdzv::kDeleteKey, {key}).at(0) == "1"; }

    bool check(const std::vector<std::string> &keys) override
    {
        if (keys.empty()) return true;
        return call(rdzv::kCheck, keys).at(0) == "1";
    }

    int64_t getNumKeys() override { return rdzv::parse_int(call(rdzv::kNumKeys, {}).at(0)).value_or(0); }

    void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }

    void wait(const std::vector<std::string> &keys, const std::chrono::milliseconds &timeout) override
    {
        if (keys.empty()) return;
        std::vector<std::string> args{std::to_string(timeout.count())};
        args.insert(args.end(), keys.begin(), keys.end());
        call(rdzv::kWait, args, timeout);
    }

    int fd() const { return fd_; }

private:
    static std::string text(const std::vector<uint8_t> &v) { return std::string(v.begin(), v.end()); }
    static std::vector<uint8_t> bytes(const std::string &s) { return std::vector<uint8_t>(s.begin(), s.end()); }

    // One request and its answer's arguments (at least one, padded with ""). A request that waits on the server
    // (get, wait: for `waits`) has a second more than that to answer, so that the server's own timeout, which
    // names the key, is what the caller reads; any other gives up after the store's timeout. A connection that
    // failed stays failed: an answer arriving late would be read as the next request's.
    std::vector<std::string> call(uint8_t op, std::vector<std::string> args, std::chrono::milliseconds waits = 0ms)
    {
        std::lock_guard<std::mutex> l(m_);
        if (!broken_.empty()) throw std::runtime_error(broken_);
        const bool waiting = op == rdzv::kGet || op == rdzv::kWait;
        const std::chrono::milliseconds limit = waiting ? (waits.count() > 0 ? waits + 1s : 0ms) : timeout_;
        const Deadline deadline = deadline_after(limit); // 0: c10d's kNoTimeout, no deadline
        bool timed_out = false;
        std::string prefix, body;
        if (!rdzv::send_all(fd_, rdzv::encode(rdzv::Message{op, std::move(args)}), deadline, &timed_out) ||
            !rdzv::recv_exact(fd_, prefix, 4, deadline, &timed_out))
            lost(timed_out, limit);
        const uint32_t n = rdzv::frame_length(reinterpret_cast<const uint8_t *>(prefix.data()));
        if (n == 0 || n > rdzv::kMaxFrame) lost_malformed("an answer of " + std::to_string(n) + " bytes");
        if (!rdzv::recv_exact(fd_, body, n, deadline, &timed_out)) lost(timed_out, limit);
        std::string why;
        auto answer = rdzv::decode_answer(reinterpret_cast<const uint8_t *>(body.data()), body.size(), &why);
        if (!answer) lost_malformed(why);
        if (answer->op == rdzv::kError) throw std::runtime_error(answer->args.empty() ? "error" : answer->args[0]);
        answer->args.resize(std::max<size_t>(answer->args.size(), 1));
        return answer->args;
    }

    [[noreturn]] void lost(bool timed_out, std::chrono::milliseconds limit)
    {
        broken_ = timed_out ? "Socket Timeout: the rendezvous store at " + where_ + " gave no answer within " + seconds_text(limit)
                            : "the rendezvous store at " + where_ + " closed the connection (its host, rank 0, exited or "
                              "was killed)";
        throw std::runtime_error(broken_);
    }

    [[noreturn]] void lost_malformed(const std::string &why)
    {
        broken_ = "the rendezvous store at " + where_ + " sent a malformed answer (" + why + ")";
        throw std::runtime_error(broken_);
    }

    std::shared_ptr<rdzv::StoreServer> server_; // the host, on the store of the process that hosts it
    int fd_;
    std::string where_;
    [[maybe_unused]] Rendezvous r_; // for clone() (LibTorch 2)
    [[maybe_unused]] std::string token_;
    std::mutex m_;
    std::string broken_;
};

// The handshake of rdzv_wire.hpp, client side.
void prove(int fd, const std::string &token, const std::string &where, std::chrono::milliseconds timeout)
{
    const Deadline deadline = deadline_after(timeout);
    bool timed_out = false;
    std::string hello, verdict, mac;
    const std::string client_nonce = rdzv::random_bytes(rdzv::kNonceBytes);
    if (!rdzv::send_all(fd, rdzv::hello(client_nonce), deadline, &timed_out) ||
        !rdzv::recv_exact(fd, hello, rdzv::kHelloBytes, deadline, &timed_out))
        throw std::runtime_error(timed_out ? "timed out waiting for the rendezvous host at " + where + " to greet (is "
                                             "rank 0 running without ACCEL_RDZV_TOKEN, or another program on its port?)"
                                           : "the rendezvous host at " + where + " closed the connection before greeting");
    const auto server_nonce = rdzv::nonce_of_hello(hello);
    if (!server_nonce)
        fail(ACCEL_ERR_PERMISSION_DENIED, "the program at " + where + " is not an accel rendezvous store with a token (is "
                                          "rank 0 running without ACCEL_RDZV_TOKEN?)");
    if (!rdzv::send_all(fd, rdzv::proof(token, *server_nonce, client_nonce), deadline, &timed_out) ||
        !rdzv::recv_exact(fd, verdict, 1, deadline, &timed_out) || verdict != "Y")
        fail(ACCEL_ERR_PERMISSION_DENIED, "the rendezvous store at " + where + " refused this process's token: every "
                                          "process of the job needs the same ACCEL_RDZV_TOKEN (or ACCEL_RDZV_TOKEN_FILE)");
    if (!rdzv::recv_exact(fd, mac, rdzv::kMacBytes, deadline, &timed_out) ||
        !rdzv::check_server_proof(token, *server_nonce, client_nonce, mac))
        fail(ACCEL_ERR_PERMISSION_DENIED, "the program at " + where + " did not prove the job's rendezvous token (another "
                                          "program listens there, or rank 0 has another ACCEL_RDZV_TOKEN)");
}

// A connection to the store at `r` that has passed the token handshake.
int open_proven(const Rendezvous &r, const std::string &token, std::chrono::milliseconds timeout)
{
    const std::string where = r.describe();
    std::string why;
    const int fd = dial(r.host, r.port, deadline_after(timeout), &why);
    if (fd < 0)
        throw std::runtime_error("timed out after " + seconds_text(timeout) + " connecting to the rendezvous store at " + where +
                                 " (" + why + ")");
    try {
        prove(fd, token, where, timeout);
    } catch (...) {
        close(fd);
        throw;
    }
    return fd;
}

// TCPStore's waitWorkers: everyone counts itself in; the host waits until all have.
void join(c10d::Store &store, bool server, size_t workers, std::chrono::milliseconds timeout)
{
    const std::string key = "accel/rdzv/joined";
    store.add(key, 1);
    if (!server) return;
    const Deadline deadline = deadline_after(timeout);
    for (;;) {
        const int64_t joined = store.add(key, 0);
        if (joined >= static_cast<int64_t>(workers)) return;
        if (std::chrono::steady_clock::now() >= deadline)
            throw std::runtime_error("Timed out after " + seconds_text(timeout) + " waiting for clients. " +
                                     std::to_string(joined) + "/" + std::to_string(workers) + " clients joined.");
        std::this_thread::sleep_for(10ms);
    }
}

} // namespace

c10::intrusive_ptr<c10d::Store> connect_authenticated(const Rendezvous &r, const std::string &token, bool server,
                                                      c10::optional<size_t> workers, std::chrono::milliseconds timeout,
                                                      std::vector<int> *sockets)
{
    std::shared_ptr<rdzv::StoreServer> host;
    if (server) // a stranger's handshake ties up a thread for at most this long
        host = std::make_shared<rdzv::StoreServer>(r.port, token, std::clamp<std::chrono::milliseconds>(timeout, 1s, 10s));
    const int fd = open_proven(r, token, timeout);
    auto store = c10::make_intrusive<AuthStore>(std::move(host), fd, r, token, timeout);
    if (sockets != nullptr) *sockets = {fd};
    if (workers) join(*store, server, *workers, timeout);
    return store;
}

} // namespace accel::distributed
