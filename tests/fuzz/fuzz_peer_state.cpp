// A peer's heartbeat as read from the rendezvous store (src/distributed/collective_tracker.*: decode_peer_state):
// the counter, its failure and status, its out-of-memory note and its collective records, written by another
// process (perhaps an older or newer accel). Any text decodes without an exception; what it decodes to writes back
// stably (encode of decode is a fixed point after one pass); the whereabouts and contradiction sentences built from
// it never fail.
#include "distributed/collective_tracker.hpp"
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel::distributed;
    const std::string text = accel::fuzz::text_of(data, size);
    const PeerState once = decode_peer_state(text);
    const std::string first = encode_peer_state(once);
    const std::string second = encode_peer_state(decode_peer_state(first));
    if (first != second) accel::fuzz::finding("the heartbeat does not write back stably: \"" + first + "\" then \"" + second + "\"");
    CollectiveRecord mine;
    mine.blocked = 3;
    mine.blocked_kind = "all_reduce";
    mine.issued = 3;
    mine.issued_kind = "all_reduce";
    for (const auto &[id, record] : once.comms) {
        (void)whereabouts(record, 1);
        (void)contradiction(mine, record, 1);
        (void)mismatch_advice(mine, &record);
    }
    return 0;
}
