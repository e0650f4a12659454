// The heartbeat and the diagnoses of peer_monitor.hpp (moved from gloo_communicator.cpp, so that the mpi backend
// names its silent ranks the same way).
#include "distributed/peer_monitor.hpp"

#include "common/error.hpp"

#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace accel::distributed {

using namespace std::chrono_literals;

namespace {

// The works bury() keeps (never destroyed: see there).
std::vector<c10::intrusive_ptr<c10d::Work>> *g_aborted = nullptr;
std::mutex g_aborted_mutex;

} // namespace

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

class PeerMonitor::Impl {
public:
    static constexpr double kPeerCheckAfter = 0.5; // seconds waited before the peers' records are read

    Impl(const char *backend, Rendezvous r, c10::intrusive_ptr<c10d::Store> shared_store, int rank, int world,
         double mismatch_delay)
        : backend_(backend), r_(std::move(r)), shared_(std::move(shared_store)), rank_(rank), world_(world),
          delay_(mismatch_delay)
    {
        thread_ = std::thread([this] { run(); });
    }
    ~Impl() { stop(); }

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
                decide(t, peer_status(p), std::string(backend_) + ": " + here + " but " +
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
                os << backend_ << ": mismatched collectives: " << here << " while " << c << "; " << mismatch_advice(mine, &it->second)
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

    const char *backend_; // "gloo", "mpi": the messages' first word
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

PeerMonitor::PeerMonitor(const char *backend, Rendezvous r, c10::intrusive_ptr<c10d::Store> shared_store, int rank,
                         int world, double mismatch_delay)
    : impl_(std::make_unique<Impl>(backend, std::move(r), std::move(shared_store), rank, world, mismatch_delay))
{
}
PeerMonitor::~PeerMonitor() = default;
void PeerMonitor::stop() { impl_->stop(); }
double PeerMonitor::mismatch_delay() const { return impl_->mismatch_delay(); }
void PeerMonitor::track(std::shared_ptr<Tracked> t) { impl_->track(std::move(t)); }
void PeerMonitor::publish_failure(accel_status_t code, const std::string &message) { impl_->publish_failure(code, message); }
std::string PeerMonitor::diagnose(accel_status_t *peer_failed, const Tracked *t, CollectiveTracker::Ticket ticket)
{
    return impl_->diagnose(peer_failed, t, ticket);
}
void PeerMonitor::note_out_of_memory(const std::string &message) { impl_->note_out_of_memory(message); }

} // namespace accel::distributed
