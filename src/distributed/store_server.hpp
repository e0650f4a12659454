// The authenticated rendezvous store's host (issue 40.4), run by rank 0 when the job has a token: a key-value
// map with the c10d::Store operations accel and c10d's process groups use (set, get, add, check, wait,
// compareSet, deleteKey, getNumKeys), served only to connections that answered the HMAC challenge
// (rdzv_wire.hpp). A connection that does not (a stranger, a wrong token, garbage) is closed and logged with its
// address; one that sends a malformed or oversized frame after it is closed and logged too. Neither disturbs
// the others: every connection has its own thread, the handshake its own deadline, and the number of
// connections a bound. No LibTorch: auth_store.cpp wraps a client around it.
// Its threads are joined when it stops: when it is destroyed, or at the process's normal exit (the process
// communicator keeps the job's store, and so this server, to the end; stop_all() runs from an atexit handler), so
// that none of them runs during static destruction (one used to answer a handshake after OpenSSL's exit handler
// had freed its random generator).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace accel::distributed::rdzv {

class StoreServer {
public:
    // Listens on every interface at `port` (IPv6 with IPv4 mapped when the machine has IPv6). std::runtime_error
    // naming the port when it cannot ("Address already in use" kept in the message for the caller's hint).
    StoreServer(int port, std::string token, std::chrono::milliseconds handshake_timeout);
    ~StoreServer(); // stop(), then frees
    StoreServer(const StoreServer &) = delete;
    StoreServer &operator=(const StoreServer &) = delete;

    // Stops serving: the listener and every connection closed (their clients' calls fail), every thread joined.
    // Idempotent; the object stays usable for its owners (whose calls then fail).
    void stop();
    // stop() of every server of this process; registered with atexit by the first one.
    static void stop_all();

    // Connections refused so far (a failed handshake, a malformed frame, over the bound): for tests.
    uint64_t refused() const { return refused_.load(); }

    // The most connections served at once; more are closed at once (and logged).
    static constexpr size_t kMaxConnections = 1024;

private:
    void accept_loop();
    void serve(int fd, const std::string &peer);
    bool handshake(int fd, const std::string &peer);
    // The answer to one request (valid: decode_request checked it).
    std::string answer(uint8_t op, const std::vector<std::string> &args);
    std::string wait_for(const std::vector<std::string> &keys, int64_t timeout_ms); // "" or the error
    void refuse(const std::string &peer, const std::string &why);

    std::string token_;
    std::chrono::milliseconds handshake_timeout_;
    int listen_fd_ = -1;
    std::thread acceptor_;
    std::atomic<bool> stopping_{false};
    std::atomic<uint64_t> refused_{0};

    std::mutex stop_m_; // stop()'s: one at a time, once
    bool stopped_ = false;

    std::mutex m_; // the map and the connections
    std::condition_variable changed_; // a key was written, or the server stops
    std::map<std::string, std::string> map_;
    // Connections being served, each by a thread of its own; stop() shuts them down and joins the threads (a
    // thread erases its descriptor before closing it, so no number is shut down twice).
    std::set<int> open_;
    size_t live_ = 0;
    std::map<uint64_t, std::thread> threads_; // by connection number
    std::vector<uint64_t> finished_;          // connections whose thread has ended: joined by the acceptor
    uint64_t next_connection_ = 0;
    void join_finished(); // the acceptor's
};

} // namespace accel::distributed::rdzv
