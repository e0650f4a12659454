#include "distributed/store_server.hpp"

#include "common/error.hpp"
#include "distributed/rdzv_wire.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace accel::distributed::rdzv {

namespace {

// A listening socket on every interface at `port`: IPv6 accepting IPv4 too, else IPv4 alone; -1 and *why.
int listen_on(int port, std::string *why)
{
    for (int family : {AF_INET6, AF_INET}) {
        const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            *why = std::strerror(errno);
            continue;
        }
        const int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_storage a{};
        socklen_t len;
        if (family == AF_INET6) {
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
            auto *v6 = reinterpret_cast<sockaddr_in6 *>(&a);
            v6->sin6_family = AF_INET6;
            v6->sin6_addr = in6addr_any;
            v6->sin6_port = htons(static_cast<uint16_t>(port));
            len = sizeof *v6;
        } else {
            auto *v4 = reinterpret_cast<sockaddr_in *>(&a);
            v4->sin_family = AF_INET;
            v4->sin_addr.s_addr = htonl(INADDR_ANY);
            v4->sin_port = htons(static_cast<uint16_t>(port));
            len = sizeof *v4;
        }
        if (bind(fd, reinterpret_cast<sockaddr *>(&a), len) == 0 && listen(fd, 128) == 0) return fd;
        const int err = errno;
        *why = std::strerror(err) + std::string(" (errno: ") + std::to_string(err) + ")";
        close(fd);
        if (err == EADDRINUSE) return -1; // the other family would only hide the cause
    }
    return -1;
}

Deadline after(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }

// The live servers, for stop_all (never destroyed: it may run during exit).
std::mutex &servers_mutex()
{
    static auto *m = new std::mutex();
    return *m;
}
std::set<StoreServer *> &servers()
{
    static auto *s = new std::set<StoreServer *>();
    return *s;
}

std::string ok(std::vector<std::string> args = {}) { return encode(Message{kOk, std::move(args)}); }
std::string error(const std::string &why) { return encode(Message{kError, {why}}); }

} // namespace

StoreServer::StoreServer(int port, std::string token, std::chrono::milliseconds handshake_timeout)
    : token_(std::move(token)), handshake_timeout_(handshake_timeout)
{
    std::string why;
    listen_fd_ = listen_on(port, &why);
    if (listen_fd_ < 0) // a runtime_error as TCPStore's: open_store adds the busy port's hint from its text
        throw std::runtime_error("cannot host the rendezvous store on port " + std::to_string(port) + ": " + why);
    acceptor_ = std::thread([this] { accept_loop(); });
    static std::once_flag registered;
    std::call_once(registered, [] { std::atexit(stop_all); });
    std::lock_guard<std::mutex> l(servers_mutex());
    servers().insert(this);
}

StoreServer::~StoreServer()
{
    {
        std::lock_guard<std::mutex> l(servers_mutex()); // (waits for a stop_all that is stopping this one)
        servers().erase(this);
    }
    stop();
}

void StoreServer::stop_all()
{
    std::lock_guard<std::mutex> l(servers_mutex());
    for (StoreServer *s : servers()) s->stop();
}

void StoreServer::stop()
{
    std::lock_guard<std::mutex> once(stop_m_);
    if (stopped_) return;
    stopped_ = true;
    stopping_ = true;
    shutdown(listen_fd_, SHUT_RDWR); // ends the acceptor's accept()
    if (acceptor_.joinable()) acceptor_.join(); // no connection thread starts after this
    close(listen_fd_);
    std::map<uint64_t, std::thread> threads;
    {
        std::lock_guard<std::mutex> l(m_);
        for (int fd : open_) shutdown(fd, SHUT_RDWR); // ends their reads and writes
        changed_.notify_all();                        // ends their waits
        threads.swap(threads_);
        finished_.clear();
    }
    for (auto &entry : threads) entry.second.join();
}

void StoreServer::join_finished()
{
    std::vector<std::thread> done;
    {
        std::lock_guard<std::mutex> l(m_);
        for (uint64_t id : finished_) {
            auto it = threads_.find(id);
            done.push_back(std::move(it->second));
            threads_.erase(it);
        }
        finished_.clear();
    }
    for (auto &t : done) t.join(); // each has ended, or is about to return
}

void StoreServer::accept_loop()
{
    while (!stopping_) {
        sockaddr_storage from{};
        socklen_t from_len = sizeof from;
        const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr *>(&from), &from_len, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED || errno == EMFILE || errno == ENFILE || errno == ENOBUFS) {
                if (errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(std::chrono::milliseconds(50));
                continue;
            }
            return; // shut down
        }
        if (stopping_) {
            close(fd);
            return;
        }
        join_finished();
        const int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        std::lock_guard<std::mutex> l(m_); // held while the thread is made: it is in threads_ before it can finish
        if (live_ >= kMaxConnections) {
            refuse(address_text(&from), "more than " + std::to_string(kMaxConnections) + " connections at once");
            close(fd);
            continue;
        }
        ++live_;
        open_.insert(fd);
        const uint64_t id = next_connection_++;
        threads_[id] = std::thread([this, fd, id, peer = address_text(&from)] {
            try {
                serve(fd, peer);
            } catch (const std::exception &e) { // bad_alloc and the like: this connection ends, the store goes on
                refuse(peer, e.what());
            }
            std::lock_guard<std::mutex> done(m_);
            open_.erase(fd);
            close(fd);
            --live_;
            finished_.push_back(id);
        });
    }
}

void StoreServer::refuse(const std::string &peer, const std::string &why)
{
    // The first refusals in full, then one line per hundred: a scan of the port must not flood the job's log.
    const uint64_t n = ++refused_;
    if (n > 10 && n % 100 != 0) return;
    std::fprintf(stderr, "accel rendezvous: error: refused the connection from %s: %s%s\n", peer.c_str(),
                 why.c_str(), n > 10 ? (" (" + std::to_string(n) + " refused so far)").c_str() : "");
}

bool StoreServer::handshake(int fd, const std::string &peer)
{
    const Deadline deadline = after(handshake_timeout_);
    const std::string server_nonce = random_bytes(kNonceBytes);
    std::string got;
    bool timed_out = false;
    // The magic first: LibTorch's TCPStore client (a process or launcher without the token) sends a request of
    // fewer bytes than a greeting and waits for an answer; it is refused at once, not after the deadline.
    std::string magic, rest;
    if (!recv_exact(fd, magic, kMagicBytes, deadline, &timed_out) ||
        (magic == hello("") && !recv_exact(fd, rest, kHelloBytes - kMagicBytes, deadline, &timed_out))) {
        if (!stopping_)
            refuse(peer, timed_out ? "no greeting of accel's rendezvous client within " +
                                         std::to_string(handshake_timeout_.count() / 1000) + " s"
                                   : "it closed the connection without proving the job's rendezvous token");
        return false;
    }
    got = magic + rest;
    const auto greeted = nonce_of_hello(got); // the client's nonce
    if (!greeted) {
        refuse(peer, "it is not accel's rendezvous client (a stranger, or a process without the job's ACCEL_RDZV_TOKEN "
                     "speaking LibTorch's TCPStore protocol)");
        return false;
    }
    if (!send_all(fd, hello(server_nonce), deadline, &timed_out)) return false;
    if (!recv_exact(fd, got, kProofBytes, deadline, &timed_out)) {
        if (!stopping_)
            refuse(peer, timed_out ? "no proof of the job's rendezvous token within " +
                                       std::to_string(handshake_timeout_.count() / 1000) + " s"
                                 : "it closed the connection without proving the job's rendezvous token");
        return false;
    }
    const auto client_nonce = check_proof(token_, server_nonce, got);
    if (!client_nonce || *client_nonce != *greeted) {
        refuse(peer, "it did not prove the job's rendezvous token (a stranger, or a process whose ACCEL_RDZV_TOKEN / "
                   "ACCEL_RDZV_TOKEN_FILE differs from rank 0's)");
        send_all(fd, "N", deadline, &timed_out);
        return false;
    }
    return send_all(fd, "Y" + server_proof(token_, server_nonce, *client_nonce), deadline, &timed_out);
}

void StoreServer::serve(int fd, const std::string &peer)
{
    if (!handshake(fd, peer)) return;
    std::string prefix, body;
    bool timed_out = false;
    for (;;) {
        if (!recv_exact(fd, prefix, 4, Deadline::max(), &timed_out)) return; // the peer closed it
        const uint32_t n = frame_length(reinterpret_cast<const uint8_t *>(prefix.data()));
        if (n == 0 || n > kMaxFrame) {
            refuse(peer, "a message of " + std::to_string(n) + " bytes (at most " + std::to_string(kMaxFrame) + ")");
            return;
        }
        if (!recv_exact(fd, body, n, after(handshake_timeout_), &timed_out)) {
            if (timed_out) refuse(peer, "a message that did not arrive whole within " +
                                          std::to_string(handshake_timeout_.count() / 1000) + " s");
            return;
        }
        std::string why;
        const auto request = decode_request(reinterpret_cast<const uint8_t *>(body.data()), body.size(), &why);
        if (!request) {
            refuse(peer, "a malformed message: " + why);
            return;
        }
        if (!send_all(fd, answer(request->op, request->args), after(handshake_timeout_), &timed_out)) return;
    }
}

std::string StoreServer::wait_for(const std::vector<std::string> &keys, int64_t timeout_ms)
{
    std::unique_lock<std::mutex> l(m_);
    auto present = [&] {
        for (const auto &k : keys)
            if (map_.count(k) == 0) return false;
        return true;
    };
    auto done = [&] { return stopping_.load() || present(); };
    if (timeout_ms == 0) changed_.wait(l, done); // c10d's kNoTimeout
    else changed_.wait_for(l, std::chrono::milliseconds(timeout_ms), done);
    if (present()) return "";
    if (stopping_) return "the rendezvous store is closing";
    return "Wait timeout: timed out after " + std::to_string(timeout_ms) + " ms waiting for key \"" + keys.front() + "\"" +
           (keys.size() > 1 ? " and " + std::to_string(keys.size() - 1) + " more" : "");
}

std::string StoreServer::answer(uint8_t op, const std::vector<std::string> &args)
{
    switch (op) {
    case kGet: {
        std::string why = wait_for({args[0]}, *parse_int(args[1]));
        if (!why.empty()) return error(why);
        std::lock_guard<std::mutex> l(m_);
        auto it = map_.find(args[0]);
        return it == map_.end() ? error("key \"" + args[0] + "\" was deleted") : ok({it->second});
    }
    case kWait: {
        std::string why = wait_for(std::vector<std::string>(args.begin() + 1, args.end()), *parse_int(args[0]));
        return why.empty() ? ok() : error(why);
    }
    default: break;
    }
    std::lock_guard<std::mutex> l(m_);
    switch (op) {
    case kSet:
        map_[args[0]] = args[1];
        changed_.notify_all();
        return ok();
    case kAdd: {
        auto it = map_.find(args[0]);
        const auto current = it == map_.end() ? std::optional<int64_t>(0) : parse_int(it->second);
        int64_t sum = 0;
        if (!current || __builtin_add_overflow(*current, *parse_int(args[1]), &sum))
            return error("add: key \"" + args[0] + "\" does not hold a number that the sum fits in");
        map_[args[0]] = std::to_string(sum);
        changed_.notify_all();
        return ok({std::to_string(sum)});
    }
    case kCheck:
        for (const auto &k : args)
            if (map_.count(k) == 0) return ok({"0"});
        return ok({"1"});
    case kCompareSet: { // c10d's rule: an absent key counts as the empty value
        auto it = map_.find(args[0]);
        if ((it == map_.end() && args[1].empty()) || (it != map_.end() && it->second == args[1])) {
            map_[args[0]] = args[2];
            changed_.notify_all();
            return ok({args[2]});
        }
        return ok({it == map_.end() ? args[1] : it->second});
    }
    case kDeleteKey: return ok({map_.erase(args[0]) > 0 ? "1" : "0"});
    case kNumKeys: return ok({std::to_string(map_.size())});
    default: return error("unknown operation");
    }
}

} // namespace accel::distributed::rdzv
