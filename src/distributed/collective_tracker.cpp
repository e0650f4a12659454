#include "distributed/collective_tracker.hpp"

#include <algorithm>
#include <chrono>
#include <sstream>

namespace accel::distributed {

const char *const kShardedForward = "a sharded model's forward";
const char *const kShardedBackward = "a sharded model's backward";

namespace {

thread_local const char *t_purpose = nullptr;

double steady_now()
{
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Fields are tab-separated, records newline-separated: neither may appear inside one.
std::string clean(const std::string &s)
{
    std::string out = s;
    for (char &c : out)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return out;
}

std::vector<std::string> split(const std::string &s, char sep)
{
    std::vector<std::string> out;
    std::string cur;
    std::istringstream in(s);
    while (std::getline(in, cur, sep)) out.push_back(cur);
    return out;
}

int64_t to_int(const std::string &s)
{
    try {
        return std::stoll(s);
    } catch (const std::exception &) {
        return 0;
    }
}

// The heartbeat counter: unsigned, so that what encode_peer_state writes (up to 2^64 - 1) reads back the same.
uint64_t to_uint(const std::string &s)
{
    try {
        return std::stoull(s);
    } catch (const std::exception &) {
        return 0;
    }
}

std::string rank_name(int32_t r) { return "rank " + std::to_string(r); }

} // namespace

CollectivePurpose::CollectivePurpose(const char *purpose) : previous_(t_purpose) { t_purpose = purpose; }
CollectivePurpose::~CollectivePurpose() { t_purpose = previous_; }
const char *CollectivePurpose::current() { return t_purpose; }

std::string encode_peer_state(const PeerState &s)
{
    std::ostringstream os;
    os << "beat\t" << s.beat << "\n";
    if (!s.failed.empty()) os << "failed\t" << clean(s.failed) << "\t" << s.failed_code << "\n";
    if (!s.out_of_memory.empty()) os << "oom\t" << clean(s.out_of_memory) << "\n"; // older readers skip the line
    for (const auto &[id, r] : s.comms)
        os << "comm\t" << clean(id) << "\t" << r.issued << "\t" << r.issued_kind << "\t" << clean(r.issued_purpose) << "\t"
           << r.blocked << "\t" << r.blocked_kind << "\t" << clean(r.blocked_purpose) << "\t" << r.quiet_ms << "\n";
    return os.str();
}

PeerState decode_peer_state(const std::string &text)
{
    PeerState s;
    for (const std::string &line : split(text, '\n')) {
        std::vector<std::string> f = split(line, '\t');
        // A field can still hold a '\r' here; cleaned as encode_peer_state cleans it, so that what is read (the
        // map's keys and their order included) is what writing it back gives.
        for (std::string &field : f) field = clean(field);
        if (f.size() == 1) s.beat = to_uint(f[0]); // a bare counter
        else if (f.size() >= 2 && f[0] == "beat") s.beat = to_uint(f[1]);
        else if (f.size() >= 2 && f[0] == "failed") {
            s.failed = f[1];
            s.failed_code = f.size() >= 3 ? static_cast<int32_t>(to_int(f[2])) : 0; // an older writer: no status
        }
        else if (f.size() >= 2 && f[0] == "oom") s.out_of_memory = f[1];
        else if (f.size() >= 5 && f[0] == "comm") {
            f.resize(9); // an older writer has no quiet_ms (0); an older reader ignores it
            CollectiveRecord r;
            r.issued = to_int(f[2]);
            r.issued_kind = f[3];
            r.issued_purpose = f[4];
            r.blocked = to_int(f[5]);
            r.blocked_kind = f[6];
            r.blocked_purpose = f[7];
            r.quiet_ms = std::max<int64_t>(0, to_int(f[8]));
            s.comms[f[1]] = r;
        }
    }
    return s;
}

std::string describe_collective(const std::string &kind, int64_t seq, const std::string &purpose)
{
    return kind + " #" + std::to_string(seq) + (purpose.empty() ? "" : " (" + purpose + ")");
}

namespace {

std::string state_phrase(const CollectiveRecord &peer)
{
    if (peer.blocked > 0) return "is in " + describe_collective(peer.blocked_kind, peer.blocked, peer.blocked_purpose);
    if (peer.issued == 0) return "is not in a collective (it has called none)";
    return "is not in a collective (its last was " + describe_collective(peer.issued_kind, peer.issued, peer.issued_purpose) +
           ")";
}

} // namespace

std::string whereabouts(const CollectiveRecord &peer, int32_t peer_rank)
{
    return rank_name(peer_rank) + " " + state_phrase(peer);
}

std::string seconds_text(int64_t ms)
{
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(1);
    os << static_cast<double>(ms) / 1000.0 << " s";
    return os.str();
}

std::string whereabouts_for(const CollectiveRecord &peer, int32_t peer_rank)
{
    return whereabouts(peer, peer_rank) + ", for " + seconds_text(peer.quiet_ms);
}

bool arrived(const CollectiveRecord &mine, const CollectiveRecord &peer)
{
    return mine.blocked > 0 && peer.blocked == mine.blocked && peer.blocked_kind == mine.blocked_kind;
}

std::string contradiction(const CollectiveRecord &mine, const CollectiveRecord &peer, int32_t peer_rank)
{
    const int64_t n = mine.blocked;
    if (n <= 0) return "";
    if (peer.blocked == n) // the same position: the same collective unless its kind differs
        return peer.blocked_kind == mine.blocked_kind ? "" : whereabouts(peer, peer_rank);
    if (peer.blocked > 0 && peer.blocked < n) // waits in one that this rank has finished
        return whereabouts(peer, peer_rank);
    if (peer.issued < n) return ""; // has not reached it and waits in nothing: maybe just slow
    if (peer.issued == n) // called #n (asynchronously) and does not wait in it
        return peer.issued_kind == mine.blocked_kind
                   ? ""
                   : rank_name(peer_rank) + " called " + describe_collective(peer.issued_kind, n, peer.issued_purpose);
    // Past #n: it finished #n (or never had one like it) while this rank still waits in it.
    return rank_name(peer_rank) + " has gone past #" + std::to_string(n) + " and " + state_phrase(peer);
}

std::string mismatch_advice(const CollectiveRecord &mine, const CollectiveRecord *peer)
{
    bool forward = mine.blocked_purpose == kShardedForward;
    if (peer != nullptr)
        forward = forward || (peer->blocked > 0 ? peer->blocked_purpose : peer->issued_purpose) == kShardedForward;
    std::string s = "every process must call the same collectives in the same order";
    if (forward)
        s += "; a sharded model's forward runs on every rank: evaluate on every process and use gather_for_metrics, "
             "not on the main process only";
    return s;
}

CollectiveTracker::CollectiveTracker() : last_change_(steady_now()) {}

CollectiveTracker::Ticket CollectiveTracker::issue(const char *kind)
{
    const double now = steady_now();
    std::lock_guard<std::mutex> l(m_);
    last_change_ = now;
    Ticket t{++issued_, kind, CollectivePurpose::current()};
    issued_kind_ = kind;
    issued_purpose_ = t.purpose;
    return t;
}

CollectiveTracker::Wait::Wait(CollectiveTracker &t, const Ticket &k) : t_(t), seq_(k.seq)
{
    const double now = steady_now();
    std::lock_guard<std::mutex> l(t_.m_);
    t_.waiting_.push_back({k, now});
}

CollectiveTracker::Wait::~Wait()
{
    const double now = steady_now();
    std::lock_guard<std::mutex> l(t_.m_);
    t_.last_change_ = now;
    for (auto it = t_.waiting_.begin(); it != t_.waiting_.end(); ++it)
        if (it->ticket.seq == seq_) {
            t_.waiting_.erase(it);
            break;
        }
}

std::pair<CollectiveTracker::Ticket, double> CollectiveTracker::earliest() const
{
    std::pair<Ticket, double> out{Ticket{}, 0.0};
    for (const auto &w : waiting_)
        if (out.first.seq == 0 || w.ticket.seq < out.first.seq) out = {w.ticket, w.since};
    return out;
}

CollectiveRecord CollectiveTracker::record() const
{
    std::lock_guard<std::mutex> l(m_);
    CollectiveRecord r;
    r.issued = issued_;
    r.issued_kind = issued_kind_;
    r.issued_purpose = issued_purpose_ ? issued_purpose_ : "";
    const auto [b, since] = earliest();
    r.quiet_ms = static_cast<int64_t>((steady_now() - (b.seq > 0 ? since : last_change_)) * 1000.0);
    r.blocked = b.seq;
    r.blocked_kind = b.kind;
    r.blocked_purpose = b.purpose ? b.purpose : "";
    return r;
}

std::pair<CollectiveTracker::Ticket, double> CollectiveTracker::blocked() const
{
    std::lock_guard<std::mutex> l(m_);
    return earliest();
}

void CollectiveTracker::set_verdict(accel_status_t code, const std::string &message)
{
    std::lock_guard<std::mutex> l(m_);
    if (!verdict_) verdict_ = Verdict{code, message};
}

std::optional<CollectiveTracker::Verdict> CollectiveTracker::verdict() const
{
    std::lock_guard<std::mutex> l(m_);
    return verdict_;
}

bool CollectiveTracker::confirm(const std::string &c, uint64_t peer_beat, double now, double delay)
{
    if (c.empty()) {
        suspect_.clear();
        return false;
    }
    if (c != suspect_) {
        suspect_ = c;
        suspect_beat_ = peer_beat;
        suspect_since_ = now;
        return false;
    }
    return peer_beat != suspect_beat_ && now - suspect_since_ >= delay;
}

} // namespace accel::distributed
