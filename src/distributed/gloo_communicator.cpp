// gloo: LibTorch's c10d ProcessGroupGloo, rendezvous through a TCPStore (env:// or tcp://) or a
// FileStore (file://), opened by rendezvous.cpp (shared with the nccl backend).
//
// Naming the rank that died: every rank writes a heartbeat counter into the store twice a second
// (its own store connection, on its own thread). When a collective fails, the counters are read twice
// 1.6 s apart; ranks whose counter did not move are named in the error. If the store itself cannot be
// reached, or gives no answer within 5 s (its host stopped: SIGSTOP, a debugger), rank 0 (which hosts it) is
// named. Every read of the store has a deadline, so no failure path waits forever (issue 42.1).
//
// ProcessGroupGloo's header includes Gloo's own headers, which Debian's LibTorch has (libgloo-dev) and
// pip's LibTorch wheels do not ship: CMake defines ACCEL_WITH_GLOO for this file where they are found.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#ifdef ACCEL_WITH_GLOO

#include "common/out_of_memory.hpp"
#include "distributed/collective_tracker.hpp"
#include "distributed/rendezvous.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

namespace accel::distributed {

namespace {

using namespace std::chrono_literals;

// "6 s", "0.5 s": a duration for messages (std::to_string would write "6.000000").
std::string seconds(std::chrono::milliseconds d)
{
    std::ostringstream os;
    os << static_cast<double>(d.count()) / 1000.0 << " s";
    return os.str();
}

// Tags of reduce_scatter's ring steps, far from those a caller of send/recv would pick.
constexpr int kReduceScatterTag = 1 << 24;
// How often a waiting collective looks for the monitor's verdict.
constexpr std::chrono::milliseconds kPollSlice{200};

// A backend failure inside a numbered collective: the diagnosis can then say where the peers are.
struct TrackedFailure : std::runtime_error {
    TrackedFailure(const std::string &what, CollectiveTracker::Ticket t) : std::runtime_error(what), ticket(t) {}
    CollectiveTracker::Ticket ticket;
};

c10d::ReduceOp to_c10d(ReduceOp op)
{
    switch (op) {
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM; // Avg: sum, then divide (gloo has no AVG)
    }
}

// The local address a socket would use to reach `host` (so that the gloo device is reachable from
// the other machines, also inside network namespaces).
std::string local_address_towards(const std::string &host, int port)
{
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo *res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "MASTER_ADDR: cannot resolve \"" + host + "\"");
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    std::string out = "127.0.0.1";
    if (fd >= 0) {
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            sockaddr_in local{};
            socklen_t len = sizeof local;
            if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0) {
                char buf[INET_ADDRSTRLEN];
                if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf)) out = buf;
            }
        }
        close(fd);
    }
    freeaddrinfo(res);
    return out;
}

// One communicator's collectives on this rank (world or group), as the monitor sees them.
struct Tracked {
    std::string id;               // "world", "group 3": the key of its record on the heartbeat
    std::vector<int32_t> members; // global ranks, by rank in the communicator
    int32_t me = 0;               // this process's global rank
    CollectiveTracker tracker;
    std::mutex m;
    std::vector<c10::intrusive_ptr<c10d::Work>> p2p; // sends/receives waited in now, aborted on a verdict

    // "" for the world, " of the group of ranks 0, 2" for a group.
    std::string where() const
    {
        if (id == "world") return "";
        std::string s = " of the group of ranks ";
        for (size_t i = 0; i < members.size(); ++i) s += (i ? ", " : "") + std::to_string(members[i]);
        return s;
    }
};

// Works aborted after a verdict: Gloo's pairs still refer to their buffers, so they are never destroyed (the
// communicator is poisoned; the process is about to fail).
std::vector<c10::intrusive_ptr<c10d::Work>> *g_aborted = nullptr;
std::mutex g_aborted_mutex;

// Ends a send or receive that nobody will wait for any more, and keeps it.
void bury(const c10::intrusive_ptr<c10d::Work> &w)
{
    try {
        w->abort();
    } catch (const std::exception &) {
    }
    std::lock_guard<std::mutex> g(g_aborted_mutex);
    if (g_aborted == nullptr) g_aborted = new std::vector<c10::intrusive_ptr<c10d::Work>>();
    g_aborted->push_back(w);
}

// ACCEL_COLLECTIVE_MISMATCH_SECONDS: how long a peer's state must contradict this rank's wait (default 5 s; 0: never
// consult the peers, a mismatch then waits for the timeout).
double mismatch_delay()
{
    const char *v = std::getenv("ACCEL_COLLECTIVE_MISMATCH_SECONDS");
    if (v == nullptr || *v == '\0') return 5.0;
    char *end = nullptr;
    double d = std::strtod(v, &end);
    if (end == v || *end != '\0' || !(d >= 0.0) || d > 1e6)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("ACCEL_COLLECTIVE_MISMATCH_SECONDS: expected seconds >= 0 (0 turns the "
                                                     "detection of mismatched collectives off), got \"") + v + "\"");
    return d;
}

// Heartbeats in the store, the diagnosis of which rank stopped, and the detection of mismatched collectives
// (collective_tracker.hpp): the heartbeat carries this rank's collective records; while one of its collectives
// has waited for kPeerCheckAfter, the peers' records are read on every beat.
class PeerMonitor {
public:
    static constexpr double kPeerCheckAfter = 0.5; // seconds waited before the peers' records are read

    PeerMonitor(Rendezvous r, c10::intrusive_ptr<c10d::Store> shared_store, int rank, int world, double mismatch_delay)
        : r_(std::move(r)), shared_(std::move(shared_store)), rank_(rank), world_(world), delay_(mismatch_delay)
    {
        thread_ = std::thread([this] { run(); });
    }
    ~PeerMonitor() { stop(); }

    // Ends the heartbeat thread, after one last beat when this rank has news (a failure) not yet published. Bounded:
    // a thread still in a read of a silent store after 1 s has its connection shut down under it.
    void stop()
    {
        {
            std::unique_lock<std::mutex> l(m_);
            stop_ = true;
            cv_.notify_all();
            if (!cv_.wait_for(l, 1s, [this] { return exited_; }))
                for (int fd : sockets_) shutdown(fd, SHUT_RDWR);
        }
        if (thread_.joinable()) thread_.join();
    }

    double mismatch_delay() const { return delay_; }

    void track(std::shared_ptr<Tracked> t)
    {
        std::lock_guard<std::mutex> l(m_);
        tracked_.push_back(std::move(t));
    }

    // This rank's first failure, published on the next beat (at once) so that peers waiting for this rank in a
    // collective end with it instead of waiting for the timeout.
    void publish_failure(accel_status_t code, const std::string &message)
    {
        {
            std::lock_guard<std::mutex> l(m_);
            if (failed_.empty()) {
                failed_ = message;
                failed_code_ = code;
            }
            beat_now_ = true;
        }
        cv_.notify_all();
    }

    // A sentence naming the ranks that stopped (best effort, takes ~2 s, never more than kDiagnosisWait). A peer
    // that published its own failure is named with it first (*peer_failed set: this failure is a consequence), then
    // one that ran out of memory. When every rank is alive and `t` waited in collective `ticket`, it says where each
    // peer is instead. The heartbeat thread reads the store for it (it owns the connection, and keeps beating
    // meanwhile); when the store does not answer (its host, rank 0, stopped), that is the answer.
    std::string diagnose(accel_status_t *peer_failed, const Tracked *t = nullptr, CollectiveTracker::Ticket ticket = {})
    {
        std::vector<std::string> first, second;
        std::vector<int64_t> silent_ms;
        {
            std::unique_lock<std::mutex> l(m_);
            if (!exited_) {
                const uint64_t asked = ++diagnosis_asked_;
                beat_now_ = true;
                cv_.notify_all();
                cv_.wait_for(l, kDiagnosisWait, [&] { return diagnosis_done_ >= asked || exited_; });
                if (diagnosis_done_ >= asked) {
                    first = diagnosis_first_;
                    second = diagnosis_second_;
                    silent_ms = diagnosis_silent_ms_;
                }
            }
        }
        if (second.empty()) return store_silent();
        for (int r = 0; r < world_; ++r) {
            PeerState p = decode_peer_state(second[static_cast<size_t>(r)]);
            if (r == rank_ || p.failed.empty()) continue;
            *peer_failed = peer_status(p);
            return p.failed_code == ACCEL_ERR_RESOURCE_EXHAUSTED ? ran_out_of_memory(r, p.failed)
                                                                  : "rank " + std::to_string(r) + " failed first: " + p.failed;
        }
        for (int r = 0; r < world_; ++r) {
            PeerState p = decode_peer_state(second[static_cast<size_t>(r)]);
            if (r == rank_ || p.out_of_memory.empty()) continue;
            *peer_failed = ACCEL_ERR_ABORTED;
            return ran_out_of_memory(r, p.out_of_memory);
        }
        std::vector<int> dead;
        for (int r = 0; r < world_; ++r)
            if (r != rank_ && first[r] == second[r]) dead.push_back(r);
        if (dead.empty()) return alive_peers(second, t, ticket);
        std::string out;
        for (int r : dead)
            out += (out.empty() ? "" : "; ") +
                   stopped(r, static_cast<size_t>(r) < silent_ms.size() ? silent_ms[static_cast<size_t>(r)] : 0);
        return out;
    }

    // This rank ran out of memory outside a collective: said on the next beat (at once).
    void note_out_of_memory(const std::string &message)
    {
        {
            std::lock_guard<std::mutex> l(m_);
            out_of_memory_ = message;
            beat_now_ = true;
        }
        cv_.notify_all();
    }

private:
    // How long a read or write of the store may take on the heartbeat connection: a host that answers nothing for
    // this long has stopped (its store thread serves a few small keys per beat).
    static constexpr std::chrono::milliseconds kStoreAnswer{5000};
    // The longest diagnose() waits: two readings 1.6 s apart, the second one at most kStoreAnswer late.
    static constexpr std::chrono::milliseconds kDiagnosisWait{kStoreAnswer + 2600ms};

    static std::string ran_out_of_memory(int r, const std::string &message)
    {
        return "rank " + std::to_string(r) + " ran out of memory: " + message;
    }

    // "rank 1 stopped responding (no heartbeat for 7.4 s)": how long this rank has seen the peer's heartbeat unchanged
    // (issue 40.5): at least the 1.6 s between the diagnosis' readings; it looks at its peers while it waits, so
    // about its wait when the peer stopped before it.
    static std::string stopped(int r, int64_t silent_ms)
    {
        return "rank " + std::to_string(r) + " stopped responding (no heartbeat for " +
               seconds_text(std::max<int64_t>(silent_ms, 1600)) + ")";
    }

    // The diagnosis when the store gives no readings.
    std::string store_silent() const
    {
        if (rank_ == 0) return "the rendezvous store is gone";
        return "rank 0 (which hosts the rendezvous store at " + r_.describe() + ") stopped responding (the store gave no "
               "answer within " + std::to_string(kStoreAnswer.count() / 1000) + " s)";
    }

    // Every peer is alive: where the peers of `t` are while this rank waits in `ticket`.
    std::string alive_peers(const std::vector<std::string> &values, const Tracked *t, CollectiveTracker::Ticket ticket)
    {
        if (t == nullptr || ticket.seq == 0) return "every rank is still alive; a peer may be stuck outside the collective";
        CollectiveRecord mine = t->tracker.record();
        mine.blocked = ticket.seq;
        mine.blocked_kind = ticket.kind;
        mine.blocked_purpose = ticket.purpose ? ticket.purpose : "";
        // The peers that did not arrive in this collective, each with where it is and for how long (issue 40.5).
        std::string missing;
        const CollectiveRecord *last = nullptr;
        std::vector<PeerState> states;
        for (int32_t g : t->members) states.push_back(decode_peer_state(values[static_cast<size_t>(g)]));
        for (size_t i = 0; i < t->members.size(); ++i) {
            const int32_t g = t->members[i];
            auto it = states[i].comms.find(t->id);
            if (g == t->me || it == states[i].comms.end() || arrived(mine, it->second)) continue;
            missing += (missing.empty() ? "" : "; ") + whereabouts_for(it->second, g);
            last = &it->second;
        }
        const std::string here = describe_collective(mine.blocked_kind, mine.blocked, mine.blocked_purpose) + t->where();
        if (missing.empty()) return "every rank is alive and in " + here + ", which did not complete";
        return "every rank is alive, but did not arrive in " + here + " with rank " + std::to_string(t->me) + ": " +
               missing + "; " + mismatch_advice(mine, last);
    }

    c10::intrusive_ptr<c10d::Store> connection()
    {
        if (r_.kind == Rendezvous::File) return shared_; // FileStore is thread-safe; extra instances would break its cleanup
        std::vector<int> fds;
        auto store = connect_tcp(r_, false, c10::nullopt, kStoreAnswer, &fds);
        std::lock_guard<std::mutex> l(m_);
        sockets_ = std::move(fds);
        return store;
    }

    std::vector<std::string> read_all(c10d::Store &s)
    {
        std::vector<std::string> out(static_cast<size_t>(world_));
        for (int r = 0; r < world_; ++r) {
            std::string key = "accel/heartbeat/" + std::to_string(r);
            if (!s.check({key})) continue;
            auto v = s.get(key);
            out[static_cast<size_t>(r)] = std::string(v.begin(), v.end());
        }
        return out;
    }

    // Heartbeat thread: remembers when each peer's counter was first seen at its present value.
    void note_beats(const std::vector<PeerState> &states, double now)
    {
        beat_seen_.resize(static_cast<size_t>(world_), {0, now});
        for (size_t r = 0; r < states.size() && r < beat_seen_.size(); ++r)
            if (states[r].beat != beat_seen_[r].first) beat_seen_[r] = {states[r].beat, now};
    }
    void note_beats(const std::vector<std::string> &values, double now)
    {
        std::vector<PeerState> states;
        for (const std::string &v : values) states.push_back(decode_peer_state(v));
        note_beats(states, now);
    }

    // How a rank ends when a peer failed first: with the peer's mismatch status when it found the collectives
    // mismatched (both broke the same rule; which of them saw it first is a race), else ABORTED.
    static accel_status_t peer_status(const PeerState &p)
    {
        return p.failed_code == ACCEL_ERR_FAILED_PRECONDITION ? ACCEL_ERR_FAILED_PRECONDITION : ACCEL_ERR_ABORTED;
    }

    // The heartbeat value: the counter, this rank's failure and its collective records.
    std::string heartbeat(uint64_t beat, const std::vector<std::shared_ptr<Tracked>> &tracked, const std::string &failed,
                          accel_status_t failed_code, const std::string &out_of_memory)
    {
        PeerState s;
        s.beat = beat;
        s.failed = failed;
        s.failed_code = failed_code;
        s.out_of_memory = out_of_memory;
        for (const auto &t : tracked) s.comms[t->id] = t->tracker.record();
        return encode_peer_state(s);
    }

    // The communicators that have waited in a collective long enough for their peers to be consulted.
    std::vector<std::shared_ptr<Tracked>> waiting(const std::vector<std::shared_ptr<Tracked>> &tracked, double now)
    {
        std::vector<std::shared_ptr<Tracked>> out;
        for (const auto &t : tracked) {
            auto [ticket, since] = t->tracker.blocked();
            if (ticket.seq > 0 && now - since >= kPeerCheckAfter && !t->tracker.verdict()) out.push_back(t);
        }
        return out;
    }

    // Applies the rule to each waiting communicator against its peers' records (read once for all of them).
    void check_peers(c10d::Store &store, const std::vector<std::shared_ptr<Tracked>> &tracked)
    {
        const double now = now_seconds();
        auto waits = waiting(tracked, now);
        if (waits.empty()) return;
        std::vector<PeerState> states;
        for (const std::string &v : read_all(store)) states.push_back(decode_peer_state(v));
        note_beats(states, now);
        for (const auto &t : waits) check(*t, states, now);
    }

    void check(Tracked &t, const std::vector<PeerState> &states, double now)
    {
        const CollectiveRecord mine = t.tracker.record();
        if (mine.blocked == 0) return;
        const std::string here = "rank " + std::to_string(t.me) + " is in " +
                                 describe_collective(mine.blocked_kind, mine.blocked, mine.blocked_purpose) + t.where();
        for (int32_t g : t.members) {
            if (g == t.me) continue;
            const PeerState &p = states[static_cast<size_t>(g)];
            if (!p.failed.empty()) { // it will not come: end with its cause
                decide(t, peer_status(p), "gloo: " + here + " but " +
                                              (p.failed_code == ACCEL_ERR_RESOURCE_EXHAUSTED
                                                   ? ran_out_of_memory(g, p.failed)
                                                   : "rank " + std::to_string(g) + " failed: " + p.failed));
                return;
            }
        }
        for (int32_t g : t.members) {
            if (g == t.me) continue;
            const PeerState &p = states[static_cast<size_t>(g)];
            auto it = p.comms.find(t.id);
            if (it == p.comms.end()) continue;
            std::string c = contradiction(mine, it->second, g);
            if (c.empty()) continue;
            if (t.tracker.confirm(std::to_string(mine.blocked) + "|" + c, p.beat, now, delay_)) {
                std::ostringstream os;
                os.precision(3);
                os << "gloo: mismatched collectives: " << here << " while " << c << "; " << mismatch_advice(mine, &it->second)
                   << " [rank " << g << " stayed so for " << delay_
                   << " s while alive; ACCEL_COLLECTIVE_MISMATCH_SECONDS sets this delay]";
                decide(t, ACCEL_ERR_FAILED_PRECONDITION, os.str());
            }
            return; // one peer at a time: the first contradicting one
        }
        t.tracker.confirm("", 0, now, delay_);
    }

    // The verdict ends the wait: collectives notice it within a poll; sends and receives are aborted.
    void decide(Tracked &t, accel_status_t code, const std::string &message)
    {
        t.tracker.set_verdict(code, message);
        std::lock_guard<std::mutex> l(t.m);
        for (auto &w : t.p2p) bury(w);
    }

    // Takes the readings diagnose() asked for: the first at once, the second 1.6 s later (on a later beat).
    void diagnosis_step(c10d::Store &store)
    {
        uint64_t asked;
        {
            std::lock_guard<std::mutex> l(m_);
            asked = diagnosis_asked_;
            if (diagnosis_done_ >= asked) return;
        }
        const double now = now_seconds();
        if (diagnosis_taking_ == 0) {
            diagnosis_reading_ = read_all(store);
            note_beats(diagnosis_reading_, now);
            diagnosis_taking_ = asked;
            diagnosis_since_ = now;
            return;
        }
        if (now - diagnosis_since_ < 1.6) return;
        auto second = read_all(store);
        note_beats(second, now);
        std::vector<int64_t> silent_ms;
        for (const auto &[beat, since] : beat_seen_) silent_ms.push_back(static_cast<int64_t>((now - since) * 1000.0));
        std::lock_guard<std::mutex> l(m_);
        diagnosis_first_ = std::move(diagnosis_reading_);
        diagnosis_second_ = std::move(second);
        diagnosis_silent_ms_ = std::move(silent_ms);
        diagnosis_done_ = diagnosis_taking_; // requests made since are served by the next pair
        diagnosis_taking_ = 0;
        cv_.notify_all();
    }

    void run()
    {
        c10::intrusive_ptr<c10d::Store> store;
        try {
            store = connection();
        } catch (const std::exception &) {
            ended();
            return;
        }
        {
            std::lock_guard<std::mutex> l(m_);
            store_ = store;
        }
        uint64_t beat = 0;
        const std::string key = "accel/heartbeat/" + std::to_string(rank_);
        std::string published_failed, published_oom;
        std::unique_lock<std::mutex> l(m_);
        for (;;) {
            const bool stopping = stop_;
            if (stopping && failed_ == published_failed && out_of_memory_ == published_oom) break; // nothing new
            auto tracked = tracked_;
            std::string failed = failed_, oom = out_of_memory_;
            const accel_status_t failed_code = failed_code_;
            beat_now_ = false;
            l.unlock();
            try {
                std::string v = heartbeat(++beat, tracked, failed, failed_code, oom);
                store->set(key, std::vector<uint8_t>(v.begin(), v.end()));
                if (!stopping) {
                    if (delay_ > 0) check_peers(*store, tracked);
                    diagnosis_step(*store);
                }
            } catch (const std::exception &) {
                ended(); // the store is gone (rank 0 exited) or silent (stopped): diagnose() says so
                return;
            }
            l.lock();
            published_failed = failed;
            published_oom = oom;
            if (stopping) break;
            cv_.wait_for(l, 500ms, [this] { return stop_ || beat_now_; });
        }
        exited_ = true;
        cv_.notify_all();
    }

    void ended()
    {
        std::lock_guard<std::mutex> l(m_);
        exited_ = true;
        cv_.notify_all();
    }

    Rendezvous r_;
    c10::intrusive_ptr<c10d::Store> shared_;
    c10::intrusive_ptr<c10d::Store> store_; // the heartbeat connection, once made
    int rank_, world_;
    double delay_; // ACCEL_COLLECTIVE_MISMATCH_SECONDS; 0: peers are never consulted
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    bool beat_now_ = false;
    bool exited_ = false; // the heartbeat thread ended (stopped, or the store failed or gave no answer)
    std::vector<int> sockets_; // the heartbeat connection's (shut down by stop() when the thread hangs in one)
    std::string out_of_memory_;
    // diagnose(): requests are numbered; the heartbeat thread serves them in pairs of readings
    uint64_t diagnosis_asked_ = 0, diagnosis_done_ = 0;
    std::vector<std::string> diagnosis_first_, diagnosis_second_;
    std::vector<int64_t> diagnosis_silent_ms_; // per rank: how long its heartbeat had not moved at the second reading
    // heartbeat thread only: the reading in progress
    uint64_t diagnosis_taking_ = 0;
    double diagnosis_since_ = 0.0;
    std::vector<std::string> diagnosis_reading_;
    std::vector<std::pair<uint64_t, double>> beat_seen_; // per rank: its counter, first seen when (now_seconds)
    std::vector<std::shared_ptr<Tracked>> tracked_;
    std::string failed_;
    accel_status_t failed_code_ = ACCEL_OK;
    std::thread thread_;
};

// What a group's communicator shares with the world's: the monitor, the poison, the group counter.
struct Shared {
    std::unique_ptr<PeerMonitor> monitor;
    c10::intrusive_ptr<c10d::Store> store;
    std::shared_ptr<::gloo::transport::Device> device;
    std::chrono::milliseconds timeout{0};
    std::mutex m;
    std::string poison;   // first failure
    int64_t groups = 0;   // new_group calls so far (same order on every rank)
};

std::vector<std::shared_ptr<Shared>> *g_live = nullptr; // stopped at exit, before LibTorch's statics go

void stop_monitors_at_exit()
{
    if (g_live == nullptr) return;
    for (auto &s : *g_live)
        if (s->monitor) s->monitor->stop();
}

class GlooCommunicator;

class GlooWork : public Work {
public:
    GlooWork(std::shared_ptr<GlooCommunicator> owner, c10::intrusive_ptr<c10d::Work> work, const char *op,
             CollectiveTracker::Ticket ticket, at::Tensor avg_target, int32_t divisor);
    void wait() override;
    double completed_at() const override { return done_->load(); }

private:
    std::shared_ptr<GlooCommunicator> owner_;
    c10::intrusive_ptr<c10d::Work> work_;
    const char *op_;
    CollectiveTracker::Ticket ticket_;
    at::Tensor avg_target_;
    int32_t divisor_;
    std::shared_ptr<std::atomic<double>> done_ = std::make_shared<std::atomic<double>>(0.0);
    bool waited_ = false;
};

class GlooCommunicator : public Communicator, public std::enable_shared_from_this<GlooCommunicator> {
public:
    GlooCommunicator(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg,
                     std::vector<int32_t> global_ranks, std::string id)
        : shared_(std::move(shared)), pg_(std::move(pg)), global_(std::move(global_ranks)),
          tracked_(std::make_shared<Tracked>())
    {
        tracked_->id = std::move(id);
        tracked_->members = global_;
        tracked_->me = global_[static_cast<size_t>(pg_->getRank())];
        if (shared_->monitor) shared_->monitor->track(tracked_);
    }

    const char *backend() const override { return "gloo"; }
    int32_t rank() const override { return pg_->getRank(); }
    int32_t size() const override { return pg_->getSize(); }
    std::chrono::milliseconds timeout() const override { return shared_->timeout; }

    std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) override
    {
        return guard("allreduce", [&] {
            require_contiguous(tensor, "allreduce");
            std::vector<at::Tensor> v{tensor};
            c10d::AllreduceOptions o;
            o.reduceOp = to_c10d(op);
            auto ticket = tracked_->tracker.issue("all_reduce");
            auto w = pg_->allreduce(v, o);
            return std::make_shared<GlooWork>(shared_from_this(), w, "allreduce", ticket,
                                              op == ReduceOp::Avg ? tensor : at::Tensor(), size());
        });
    }

    std::vector<at::Tensor> allgather(const at::Tensor &tensor) override
    {
        return guard("allgather", [&] {
            at::Tensor in = tensor.contiguous();
            std::vector<std::vector<at::Tensor>> out(1);
            for (int i = 0; i < size(); ++i) out[0].push_back(at::empty_like(in));
            std::vector<at::Tensor> inputs{in};
            auto ticket = tracked_->tracker.issue("all_gather");
            wait_collective(*pg_->allgather(out, inputs), ticket);
            return out[0];
        });
    }

    void broadcast(at::Tensor &tensor, int32_t root) override
    {
        check_rank(root, "root");
        guard("broadcast", [&] {
            require_contiguous(tensor, "broadcast");
            std::vector<at::Tensor> v{tensor};
            c10d::BroadcastOptions o;
            o.rootRank = root;
            auto ticket = tracked_->tracker.issue("broadcast");
            wait_collective(*pg_->broadcast(v, o), ticket);
            return 0;
        });
    }

    at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp op) override
    {
        if (input.dim() < 1 || input.size(0) % size() != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "reduce_scatter: dimension 0 (" + std::to_string(input.dim() ? input.size(0) : 0) +
                                                 ") must be a multiple of the number of processes (" +
                                                 std::to_string(size()) + ")");
        const int32_t n = size(), r = rank();
        const int64_t chunk = input.size(0) / n;
        if (n == 1) return input.clone(at::MemoryFormat::Contiguous);
        if (op != ReduceOp::Sum) { // other operations are rare here: all-reduce, then keep this rank's chunk
            at::Tensor all = input.clone(at::MemoryFormat::Contiguous);
            allreduce(all, op);
            return all.narrow(0, chunk * r, chunk).clone();
        }
        // ProcessGroupGloo (LibTorch 1.13) has no reduce_scatter: a ring of sends and receives. At step s rank r
        // passes its partial sum of chunk r-s-1 on to rank r+1 and adds rank r-1's partial sum of chunk r-s-2 to
        // its own; after n-1 steps it holds chunk r summed over every rank. Half the bytes of an all-reduce.
        return guard("reduce_scatter", [&] {
            const at::Tensor in = input.contiguous();
            auto index = [n](int64_t i) { return ((i % n) + n) % n; };
            at::Tensor work = in.narrow(0, index(r - 1) * chunk, chunk);
            at::Tensor incoming = at::empty_like(work);
            auto ticket = tracked_->tracker.issue("reduce_scatter");
            for (int32_t step = 0; step < n - 1; ++step) {
                std::vector<at::Tensor> out{work}, got{incoming};
                auto sent = pg_->send(out, static_cast<int>(index(r + 1)), kReduceScatterTag + step);
                wait_p2p(pg_->recv(got, static_cast<int>(index(r - 1)), kReduceScatterTag + step), ticket);
                wait_p2p(sent, ticket);
                work = in.narrow(0, index(r - step - 2) * chunk, chunk) + incoming;
            }
            return work;
        });
    }

    void send(const at::Tensor &tensor, int32_t dst, int32_t tag) override
    {
        check_rank(dst, "dst");
        guard("send", [&] {
            std::vector<at::Tensor> v{tensor.contiguous()};
            pg_->send(v, dst, tag)->wait(shared_->timeout);
            return 0;
        });
    }

    void recv(at::Tensor &tensor, int32_t src, int32_t tag) override
    {
        check_rank(src, "src");
        guard("recv", [&] {
            require_contiguous(tensor, "recv");
            std::vector<at::Tensor> v{tensor};
            pg_->recv(v, src, tag)->wait(shared_->timeout);
            return 0;
        });
    }

    void barrier() override
    {
        guard("barrier", [&] {
            auto ticket = tracked_->tracker.issue("barrier");
            wait_collective(*pg_->barrier(), ticket);
            return 0;
        });
    }

    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) override
    {
        for (size_t i = 0; i < ranks.size(); ++i) {
            check_rank(ranks[i], "ranks");
            if (i > 0 && ranks[i] <= ranks[i - 1])
                fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected sorted, unique ranks");
        }
        if (ranks.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected at least one rank");
        int64_t id;
        {
            std::lock_guard<std::mutex> l(shared_->m);
            id = shared_->groups++;
        }
        auto it = std::find(ranks.begin(), ranks.end(), rank());
        if (it == ranks.end()) return nullptr;
        return guard("new_group", [&]() -> std::shared_ptr<Communicator> {
            auto store = c10::make_intrusive<c10d::PrefixStore>("accel/group/" + std::to_string(id) + "/", shared_->store);
            auto opts = c10d::ProcessGroupGloo::Options::create(shared_->timeout);
            opts->devices.push_back(shared_->device);
            opts->threads = 2;
            auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(it - ranks.begin()),
                                                                  static_cast<int>(ranks.size()), opts);
            std::vector<int32_t> global;
            for (int32_t r : ranks) global.push_back(global_[static_cast<size_t>(r)]);
            return std::make_shared<GlooCommunicator>(shared_, pg, global, "group " + std::to_string(id));
        });
    }

    // Runs a c10d call; turns its failure into UNAVAILABLE / DEADLINE_EXCEEDED naming the lost rank.
    template <class F>
    auto guard(const char *op, F &&f) -> decltype(f())
    {
        check_poison(op);
        try {
            return f();
        } catch (const Error &) {
            throw;
        } catch (const std::bad_alloc &) {
            out_of_memory(op, "std::bad_alloc");
        } catch (const TrackedFailure &e) {
            if (is_out_of_memory(e.what())) out_of_memory(op, e.what());
            failed(op, e.what(), &e.ticket);
        } catch (const std::exception &e) {
            if (is_out_of_memory(e.what())) out_of_memory(op, e.what());
            failed(op, e.what(), nullptr);
        }
    }

    // An allocation failed in a collective (its buffers, or Gloo's): this rank's failure, not a peer's. The
    // communicator is poisoned (the peers may be in the collective without this rank) and the peers learn
    // "rank r ran out of memory" on the next heartbeat.
    [[noreturn]] void out_of_memory(const char *op, const std::string &what)
    {
        const std::string full = "gloo " + std::string(op) + " on rank " + std::to_string(global_[rank()]) + ": " +
                                 out_of_memory_message(first_line(what));
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = full;
        }
        if (shared_->monitor) shared_->monitor->publish_failure(ACCEL_ERR_RESOURCE_EXHAUSTED, full);
        fail(ACCEL_ERR_RESOURCE_EXHAUSTED, full);
    }

    void note_out_of_memory(const std::string &message) override
    {
        if (shared_->monitor) shared_->monitor->note_out_of_memory(message);
    }

    // Waits for collective `ticket`'s work in slices, so that a verdict of the monitor (a peer that is not in this
    // collective, or that failed) ends the wait. A collective that completes within the first slice costs what a
    // plain wait does. c10d's Work::wait(timeout) leaves the operation running when the slice expires.
    void wait_collective(c10d::Work &w, const CollectiveTracker::Ticket &ticket)
    {
        CollectiveTracker::Wait waiting(tracked_->tracker, ticket);
        try {
            const auto deadline = std::chrono::steady_clock::now() + shared_->timeout;
            for (;;) {
                if (w.isCompleted()) { // returns, or throws what the operation threw
                    w.wait();
                    return;
                }
                auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
                if (left <= 0ms) throw std::runtime_error("Operation timed out!");
                try {
                    w.wait(std::min<std::chrono::milliseconds>(left, kPollSlice));
                    return;
                } catch (const std::exception &) {
                    if (!w.isCompleted()) check_verdict(); // else: completed meanwhile, the next pass says how
                }
            }
        } catch (const Error &) {
            throw;
        } catch (const std::exception &e) {
            throw TrackedFailure(e.what(), ticket);
        }
    }

    // A send or receive of collective `ticket` (reduce_scatter's ring): waited in whole, and aborted by the monitor
    // on a verdict (Gloo's unbound buffers end a wait when aborted; a timed-out wait would close every pair).
    void wait_p2p(const c10::intrusive_ptr<c10d::Work> &w, const CollectiveTracker::Ticket &ticket)
    {
        CollectiveTracker::Wait waiting(tracked_->tracker, ticket);
        {
            std::lock_guard<std::mutex> l(tracked_->m);
            tracked_->p2p.push_back(w);
        }
        auto unregister = [&] {
            std::lock_guard<std::mutex> l(tracked_->m);
            tracked_->p2p.erase(std::find(tracked_->p2p.begin(), tracked_->p2p.end(), w));
        };
        bool done = false;
        try {
            check_verdict(); // one set before this work was registered aborted nothing
            done = w->wait(shared_->timeout);
        } catch (const Error &) {
            unregister();
            bury(w);
            throw;
        } catch (const std::exception &e) {
            unregister();
            check_verdict();
            throw TrackedFailure(e.what(), ticket);
        }
        unregister();
        check_verdict(); // aborted by the monitor
        if (!done) throw TrackedFailure("the operation was aborted", ticket);
    }

    // A verdict of the monitor ends the collective: the communicator is poisoned with it, and peers learn of it
    // from this rank's next heartbeat.
    void check_verdict()
    {
        auto v = tracked_->tracker.verdict();
        if (!v) return;
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = v->message;
        }
        if (shared_->monitor) shared_->monitor->publish_failure(v->code, v->message);
        fail(v->code, v->message);
    }

    void check_poison(const char *op)
    {
        std::lock_guard<std::mutex> l(shared_->m);
        if (!shared_->poison.empty())
            fail(ACCEL_ERR_ABORTED, std::string("gloo ") + op + ": communication already failed: " + shared_->poison);
    }

    [[noreturn]] void failed(const char *op, const std::string &what, const CollectiveTracker::Ticket *ticket)
    {
        std::string msg = first_line(what);
        bool timed_out = msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos ||
                         msg.find("timeout") != std::string::npos;
        accel_status_t peer_failed = ACCEL_OK;
        std::string who = !shared_->monitor ? ""
                          : ticket      ? shared_->monitor->diagnose(&peer_failed, tracked_.get(), *ticket)
                                        : shared_->monitor->diagnose(&peer_failed);
        // The collective by its number when it is one (issue 40.5): "gloo all_reduce #6 failed ..."
        const std::string collective = ticket != nullptr && ticket->seq > 0
                                     ? describe_collective(ticket->kind, ticket->seq, ticket->purpose ? ticket->purpose : "")
                                     : std::string(op);
        std::string full = "gloo " + collective + " failed on rank " + std::to_string(global_[rank()]) + " of " +
                           std::to_string(global_.size()) + (who.empty() ? "" : ": " + who) +
                           (timed_out ? " (timeout " + seconds(shared_->timeout) + ")" : "") +
                           " [" + msg + "]";
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = full;
        }
        const accel_status_t code = peer_failed != ACCEL_OK ? peer_failed
                                    : timed_out                ? ACCEL_ERR_DEADLINE_EXCEEDED
                                                               : ACCEL_ERR_UNAVAILABLE;
        if (shared_->monitor) shared_->monitor->publish_failure(code, full);
        fail(code, full);
    }

    std::chrono::milliseconds wait_timeout() const { return shared_->timeout; }

private:
    void check_rank(int32_t r, const char *what) const
    {
        if (r < 0 || r >= size())
            fail(ACCEL_ERR_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) + " is not in 0.." +
                                             std::to_string(size() - 1));
    }
    static void require_contiguous(const at::Tensor &t, const char *op)
    {
        if (!t.is_contiguous())
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(op) + ": the tensor must be contiguous");
    }

    std::shared_ptr<Shared> shared_;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
    std::vector<int32_t> global_;
    std::shared_ptr<Tracked> tracked_;
};

GlooWork::GlooWork(std::shared_ptr<GlooCommunicator> owner, c10::intrusive_ptr<c10d::Work> work, const char *op,
                   CollectiveTracker::Ticket ticket, at::Tensor avg_target, int32_t divisor)
    : owner_(owner), work_(std::move(work)), op_(op), ticket_(ticket), avg_target_(std::move(avg_target)), divisor_(divisor)
{
    auto done = done_;
    try {
        work_->getFuture()->addCallback([done](c10::ivalue::Future &) { done->store(now_seconds()); });
    } catch (const std::exception &) {
        // No future: completed_at() is taken when wait() returns.
    }
}

void GlooWork::wait()
{
    if (waited_) return;
    owner_->guard(op_, [&] {
        owner_->wait_collective(*work_, ticket_);
        return 0;
    });
    waited_ = true;
    if (done_->load() == 0.0) done_->store(now_seconds());
    if (avg_target_.defined()) {
        if (at::isFloatingType(avg_target_.scalar_type())) avg_target_.div_(divisor_);
        else avg_target_.div_(divisor_, "floor");
    }
}

} // namespace

std::shared_ptr<Communicator> make_gloo_communicator(const config::AcceleratorConfig &c)
{
    const auto &t = c.topology;
    Rendezvous r = rendezvous_of(c);
    auto timeout = init_timeout(c);
    const double delay = mismatch_delay();
    auto shared = std::make_shared<Shared>();
    shared->timeout = timeout;
    shared->store = open_store(r, c, "gloo");
    std::string local = r.kind == Rendezvous::File ? "127.0.0.1" : local_address_towards(r.host, r.port);
    if (const char *ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0')
        shared->device = c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
    else
        shared->device = c10d::ProcessGroupGloo::createDeviceForHostname(local);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(shared->device);
    opts->threads = 2;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
    try {
        pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
            c10::make_intrusive<c10d::PrefixStore>("accel/world/", shared->store), t.rank, t.world_size, opts);
    } catch (const std::exception &e) {
        fail(ACCEL_ERR_UNAVAILABLE, "gloo: connecting rank " + std::to_string(t.rank) + " of " +
                                        std::to_string(t.world_size) + " to its peers failed: " + first_line(e.what()));
    }
    shared->monitor = std::make_unique<PeerMonitor>(r, shared->store, t.rank, t.world_size, delay);
    if (g_live == nullptr) {
        g_live = new std::vector<std::shared_ptr<Shared>>();
        std::atexit(stop_monitors_at_exit);
    }
    g_live->push_back(shared);
    std::vector<int32_t> ranks;
    for (int32_t i = 0; i < t.world_size; ++i) ranks.push_back(i);
    return std::make_shared<GlooCommunicator>(shared, pg, ranks, "world");
}

bool gloo_compiled() { return true; }

} // namespace accel::distributed

#else // the LibTorch has no Gloo headers

namespace accel::distributed {

std::shared_ptr<Communicator> make_gloo_communicator(const config::AcceleratorConfig &)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: \"gloo\" was not compiled into this "
                                  "accel: its LibTorch has no Gloo headers (pip's wheels ship none); use \"nccl\" or "
                                  "\"mpi\", or build against a LibTorch with Gloo (Debian's libtorch-dev)");
}

bool gloo_compiled() { return false; }

} // namespace accel::distributed

#endif
