// Mismatched collectives: every rank must call the same collectives in the same order. When one rank waits in
// a collective that a peer is not in (the peer is in another kind of collective, or past this one), the waiting
// rank would otherwise hang until the timeout. Each communicator numbers the collectives it issues (#1, #2, ...)
// and records which one it waits in (CollectiveTracker: a few words under a mutex, no communication); the
// heartbeat thread publishes these records in the rendezvous store with the heartbeat it writes anyway, and
// only while this rank has been waiting for a while does it read its peers' records and apply the rule
// (contradiction()). A peer whose record contradicts this rank's wait for the detection delay, while its
// heartbeat goes on, fails the wait with ACCEL_ERR_FAILED_PRECONDITION. A peer in no collective at all is never
// a mismatch (it may be computing before the same collective); it is only named when the timeout expires.
// Backend-independent: no LibTorch.
#pragma once

#include <accel/status.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace accel::distributed {

// What one rank does in one communicator, as published on its heartbeat.
struct CollectiveRecord {
    int64_t issued = 0;          // collectives issued so far: the last one is #issued
    std::string issued_kind;     // e.g. "all_gather"
    std::string issued_purpose;  // what it was for (CollectivePurpose), "" when unknown
    int64_t blocked = 0;         // the collective this rank waits in, 0 when none
    std::string blocked_kind, blocked_purpose;
    // How long it has been so, when the heartbeat was written (milliseconds, the writer's own clock): in its wait
    // when blocked, else since it last issued or finished waiting in a collective. A peer's duration, not a time,
    // so that the machines' clocks need not agree. 0 from an older writer.
    int64_t quiet_ms = 0;
};

// A rank's published state: its heartbeat counter, its first failure (if any) and one record per communicator
// ("world", "group 0", ...).
struct PeerState {
    uint64_t beat = 0;
    std::string failed;
    // The failure's status: a mismatch found by this rank (ACCEL_ERR_FAILED_PRECONDITION) is the same broken rule
    // for its peers, which report it with that status; anything else ends them with ACCEL_ERR_ABORTED.
    int32_t failed_code = 0;
    // Its last out-of-memory outside a collective ("" when none): not a failure of the communicator (the program may
    // go on with less), but what a peer's failing collective names as the likely cause.
    std::string out_of_memory;
    std::map<std::string, CollectiveRecord> comms;
};

std::string encode_peer_state(const PeerState &s);
// Parses what encode_peer_state wrote; a bare counter (an older writer) gives a state with no records.
PeerState decode_peer_state(const std::string &text);

// "all_gather #12 (a sharded model's forward)"
std::string describe_collective(const std::string &kind, int64_t seq, const std::string &purpose);

// Why `peer`'s record contradicts this rank waiting in mine.blocked (which must be > 0), as "rank 1 is in
// barrier #12", or "" when it does not: the peer is in the same collective, or has issued it and is not
// waiting in another, or has not reached it and waits in nothing (it may just be slow).
std::string contradiction(const CollectiveRecord &mine, const CollectiveRecord &peer, int32_t peer_rank);

// Where `peer` is, for a message: "rank 1 is in barrier #12" / "rank 1 is not in a collective (its last was ...)".
std::string whereabouts(const CollectiveRecord &peer, int32_t peer_rank);
// The same with how long it has been so, for a timeout's message (issue 40.5): "rank 1 is not in a collective
// (its last was all_reduce #5), for 12.3 s".
std::string whereabouts_for(const CollectiveRecord &peer, int32_t peer_rank);
// Whether `peer` waits in this rank's collective mine.blocked (same number and kind): it arrived.
bool arrived(const CollectiveRecord &mine, const CollectiveRecord &peer);
// "12.3 s" / "0.4 s": a duration in milliseconds for messages.
std::string seconds_text(int64_t ms);

// The rule and its remedy, for messages: always the rule, and the evaluation advice when either collective is
// a sharded model's forward.
std::string mismatch_advice(const CollectiveRecord &mine, const CollectiveRecord *peer);

// The purpose string of a sharded model's forward (sharded_data_parallel.cpp names its collectives with it).
extern const char *const kShardedForward;
extern const char *const kShardedBackward;

// Names what the collectives issued by this thread are for, until destroyed (nested: the innermost wins).
// The sharding engine's collective queue carries the submitting thread's purpose to its own thread.
class CollectivePurpose {
public:
    explicit CollectivePurpose(const char *purpose); // a string literal, or nullptr for none
    ~CollectivePurpose();
    CollectivePurpose(const CollectivePurpose &) = delete;
    CollectivePurpose &operator=(const CollectivePurpose &) = delete;
    static const char *current();

private:
    const char *previous_;
};

// One communicator's collectives on this rank. Thread-safe; issue() and the waits are the hot path (a mutex,
// no allocation when the purpose is unchanged).
class CollectiveTracker {
public:
    struct Ticket {
        int64_t seq = 0;
        const char *kind = "";
        const char *purpose = nullptr;
    };
    // A wait on a collective: the record says so until it is destroyed. Waits may overlap (several threads, or
    // asynchronous collectives): the record shows the earliest collective waited in.
    class Wait {
    public:
        Wait(CollectiveTracker &t, const Ticket &k);
        ~Wait();
        Wait(const Wait &) = delete;
        Wait &operator=(const Wait &) = delete;

    private:
        CollectiveTracker &t_;
        int64_t seq_;
    };
    struct Verdict {
        accel_status_t code;
        std::string message;
    };

    // Numbers a collective of `kind` (a string literal) issued by the calling thread, with its purpose.
    Ticket issue(const char *kind);
    CollectiveTracker();
    CollectiveRecord record() const;
    // The earliest collective waited in and since when (steady seconds); seq 0 when none.
    std::pair<Ticket, double> blocked() const;

    // Set by the heartbeat thread; a wait that sees one ends with it.
    void set_verdict(accel_status_t code, const std::string &message);
    std::optional<Verdict> verdict() const;

    // The heartbeat thread's memory of a contradiction it saw: the verdict comes when the same one is seen
    // again at least `delay` seconds later with the peer's heartbeat having moved (a live peer, not a dead
    // one's last record). Returns whether it is now confirmed.
    bool confirm(const std::string &contradiction, uint64_t peer_beat, double now, double delay);

private:
    mutable std::mutex m_;
    int64_t issued_ = 0;
    const char *issued_kind_ = "";
    const char *issued_purpose_ = nullptr;
    struct Waiting {
        Ticket ticket;
        double since;
    };
    std::vector<Waiting> waiting_; // the waits in progress (rarely more than one)
    double last_change_;           // when a collective was last issued or a wait ended (steady seconds)
    std::pair<Ticket, double> earliest() const; // with m_ held
    std::optional<Verdict> verdict_;
    // heartbeat thread only
    std::string suspect_;
    uint64_t suspect_beat_ = 0;
    double suspect_since_ = 0.0;
};

} // namespace accel::distributed
