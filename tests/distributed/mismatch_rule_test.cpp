// The rule of mismatched collectives (src/distributed/collective_tracker.hpp) case by case, and the heartbeat's
// encoding of the records, without processes: what each peer record means while this rank waits in #5.
#include "distributed/collective_tracker.hpp"

#include <cstdio>
#include <string>

using namespace accel::distributed;

namespace {

int failures = 0;

void expect(bool ok, const std::string &what)
{
    if (!ok) {
        std::fprintf(stderr, "FAILED: %s\n", what.c_str());
        ++failures;
    }
}

CollectiveRecord rec(int64_t issued, const char *kind, int64_t blocked, const char *blocked_kind = "",
                     const char *purpose = "")
{
    CollectiveRecord r;
    r.issued = issued;
    r.issued_kind = kind;
    r.blocked = blocked;
    r.blocked_kind = blocked_kind;
    r.blocked_purpose = purpose;
    return r;
}

void expect_rule(const CollectiveRecord &mine, const CollectiveRecord &peer, const std::string &want, const char *what)
{
    std::string got = contradiction(mine, peer, 1);
    expect(got == want, std::string(what) + ": got \"" + got + "\", want \"" + want + "\"");
}

} // namespace

int main()
{
    const CollectiveRecord mine = rec(5, "all_gather", 5, "all_gather", kShardedForward);
    // Matched, or possibly matched: never a contradiction.
    expect_rule(mine, rec(5, "all_gather", 5, "all_gather"), "", "the same collective");
    expect_rule(mine, rec(4, "all_reduce", 0), "", "not arrived yet, in no collective (maybe slow)");
    expect_rule(mine, rec(0, "", 0), "", "no collective yet");
    expect_rule(mine, rec(5, "all_gather", 0), "", "issued #5 (the same kind) asynchronously, not waiting");
    expect_rule(mine, rec(7, "all_reduce", 5, "all_gather"), "", "waits in #5 with later ones issued");
    // Contradictions.
    expect_rule(mine, rec(5, "barrier", 5, "barrier"), "rank 1 is in barrier #5", "another kind at the same position");
    expect_rule(mine, rec(4, "barrier", 4, "barrier"), "rank 1 is in barrier #4", "in an earlier collective");
    expect_rule(mine, rec(5, "reduce_scatter", 0), "rank 1 called reduce_scatter #5", "issued another kind as #5");
    expect_rule(mine, rec(6, "barrier", 6, "barrier"), "rank 1 has gone past #5 and is in barrier #6", "past, waiting");
    expect_rule(mine, rec(6, "all_gather", 0),
                "rank 1 has gone past #5 and is not in a collective (its last was all_gather #6)", "past, idle");
    expect_rule(rec(5, "barrier", 0), rec(5, "barrier", 5, "barrier"), "", "this rank waits in nothing");
    // Messages.
    expect(whereabouts(rec(4, "reduce_scatter", 0), 1) == "rank 1 is not in a collective (its last was reduce_scatter #4)",
           "whereabouts of an idle peer");
    expect(mismatch_advice(mine, nullptr).find("evaluate on every process and use gather_for_metrics") != std::string::npos,
           "the advice for a sharded forward");
    expect(mismatch_advice(rec(5, "barrier", 5, "barrier"), nullptr).find("gather_for_metrics") == std::string::npos,
           "no evaluation advice without a sharded forward");
    // The heartbeat value round trip, and an older writer's bare counter.
    PeerState s;
    s.beat = 42;
    s.failed = "gloo: rank 0\tfailed\nbadly";
    s.failed_code = ACCEL_ERR_FAILED_PRECONDITION;
    s.comms["world"] = mine;
    s.comms["group 1"] = rec(3, "reduce_scatter", 0);
    PeerState back = decode_peer_state(encode_peer_state(s));
    expect(back.beat == 42 && back.failed == "gloo: rank 0 failed badly" && back.comms.size() == 2, "round trip");
    expect(back.failed_code == ACCEL_ERR_FAILED_PRECONDITION, "the failure's status travels with it");
    expect(decode_peer_state("beat\t3\nfailed\tolder writer\n").failed_code == 0, "an older writer's failure: no status");
    const CollectiveRecord &w = back.comms["world"];
    expect(w.issued == 5 && w.issued_kind == "all_gather" && w.blocked == 5 && w.blocked_kind == "all_gather" &&
               w.blocked_purpose == kShardedForward,
           "round trip of a record");
    expect(decode_peer_state("17").beat == 17 && decode_peer_state("17").comms.empty(), "a bare counter");
    {
        // A '\r' in a communicator's name reads back as encode writes it (a space), so the map's order is what
        // writing it back gives (fuzz.peer_state found "a\r" sorted before "a\x0e" and after it once written).
        const std::string first = encode_peer_state(decode_peer_state("comm\ta\r\t1\tx\t\t0\t\t\ncomm\ta\x0e\t1\tx\t\t0\t\t\n"));
        expect(first == encode_peer_state(decode_peer_state(first)), "a name with a carriage return writes back stably");
    }
    {
        // How long a peer has been so (issue 40.5): carried on the heartbeat, 0 from an older writer, and said with
        // whereabouts for a timeout's message; arrived() only for the same collective.
        PeerState q;
        q.comms["world"] = rec(4, "all_reduce", 0);
        q.comms["world"].quiet_ms = 12345;
        const CollectiveRecord got = decode_peer_state(encode_peer_state(q)).comms["world"];
        expect(got.quiet_ms == 12345, "quiet_ms round trip");
        expect(decode_peer_state("comm\tworld\t4\tall_reduce\t\t0\t\t\n").comms["world"].quiet_ms == 0, "an older writer");
        expect(whereabouts_for(got, 1) == "rank 1 is not in a collective (its last was all_reduce #4), for 12.3 s",
               "whereabouts with the silence: " + whereabouts_for(got, 1));
        expect(arrived(rec(5, "all_reduce", 5, "all_reduce"), rec(5, "all_reduce", 5, "all_reduce")) &&
                   !arrived(rec(5, "all_reduce", 5, "all_reduce"), rec(5, "barrier", 5, "barrier")) &&
                   !arrived(rec(5, "all_reduce", 5, "all_reduce"), got),
               "arrived: the same number and kind only");
    }
    // The tracker: numbering, overlapping waits show the earliest, purpose from the thread.
    CollectiveTracker t;
    CollectiveTracker::Ticket a, b;
    {
        CollectivePurpose p(kShardedBackward);
        a = t.issue("all_reduce");
        b = t.issue("all_reduce");
    }
    expect(a.seq == 1 && b.seq == 2 && t.record().issued_purpose == kShardedBackward, "numbering and purpose");
    {
        CollectiveTracker::Wait wa(t, a);
        {
            CollectiveTracker::Wait wb(t, b);
            expect(t.record().blocked == 1, "two waits: the earliest is shown");
        }
        expect(t.record().blocked == 1, "one wait left");
    }
    expect(t.record().blocked == 0, "no wait");
    // A contradiction is confirmed only when seen again after the delay with the peer's heartbeat moved.
    expect(!t.confirm("x", 1, 10.0, 5.0), "first sight");
    expect(!t.confirm("x", 1, 16.0, 5.0), "the peer's heartbeat did not move (a dead peer's last record)");
    expect(!t.confirm("x", 3, 12.0, 5.0), "not yet the delay");
    expect(t.confirm("x", 3, 15.5, 5.0), "confirmed");
    expect(!t.confirm("y", 4, 30.0, 5.0), "another contradiction starts again");
    if (failures == 0) std::printf("mismatch rule: all cases pass\n");
    return failures == 0 ? 0 : 1;
}
