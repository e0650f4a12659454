// The order in which one pipeline stage runs its micro-batches (pure: tested without a model or a
// communicator). Each op names a micro-batch; the transfers are ops of their own, so a schedule fixes the
// order of the sends and receives on each link between neighbouring stages. Both sides of a link issue
// their transfers in the same order, so a send that blocks until its receive is posted (NCCL, which pairs by
// order and has no tags; MPI's synchronous sends) cannot deadlock: tests/unit/parallel checks this for
// every schedule by playing the stages against each other with rendezvous transfers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::parallel::pp {

enum class OpKind : int32_t {
    RecvActivation, // from the previous stage (not on the first)
    Forward,        // this stage's layers; on the last, the loss too
    SendActivation, // to the next stage (not on the last)
    RecvGrad,       // the output's gradient from the next stage (not on the last)
    Backward,
    SendGrad, // the input's gradient to the previous stage (not on the first)
};

struct Op {
    OpKind kind;
    int64_t micro;
    bool operator==(const Op &o) const { return kind == o.kind && micro == o.micro; }
};

// "gpipe": every forward, then every backward, the last micro-batch first (Schedule GPipe in
// torch.distributed.pipelining). "1f1b" (Schedule1F1B; Megatron-LM's non-interleaved schedule): stage s runs
// min(p - s - 1, m) warm-up forwards, then alternates one forward with one backward (oldest first), then
// drains the remaining backwards: at most p - s micro-batches' activations live at once instead of m.
// In the steady phase a stage receives the gradient of its oldest micro-batch before it sends its newest
// activation: the next stage sends that gradient before it receives that activation (Megatron pairs the two
// in one batched exchange instead). INVALID_ARGUMENT for another name.
std::vector<Op> stage_schedule(const std::string &schedule, int32_t stage, int32_t stages, int64_t micro_batches);

// The most micro-batches whose activations a stage holds at once under `ops` (forwards not yet backwarded).
int64_t peak_live_micro_batches(const std::vector<Op> &ops);

} // namespace accel::parallel::pp
