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

// `chunk`: which of the stage's model chunks (virtual stages) the op is for; 0 unless interleaved. A transfer's
// chunk is the sender's for a send and the receiving chunk's for a receive.
struct Op {
    OpKind kind;
    int64_t micro;
    int32_t chunk = 0;
    bool operator==(const Op &o) const { return kind == o.kind && micro == o.micro && chunk == o.chunk; }
};

// Under "interleaved_1f1b" stage s holds `chunks` model chunks; chunk c is virtual stage c * stages + s of
// chunks * stages, so activations go round the ring of stages `chunks` times (the last stage's chunk c feeds
// the first stage's chunk c + 1). With one chunk these are the neighbouring stages.
struct VirtualStage {
    int32_t stage;
    int32_t chunk;
};
VirtualStage next_virtual_stage(int32_t stage, int32_t chunk, int32_t stages);
VirtualStage previous_virtual_stage(int32_t stage, int32_t chunk, int32_t stages);

// "gpipe": every forward, then every backward, the last micro-batch first (Schedule GPipe in
// torch.distributed.pipelining). "1f1b" (Schedule1F1B; Megatron-LM's non-interleaved schedule): stage s runs
// min(p - s - 1, m) warm-up forwards, then alternates one forward with one backward (oldest first), then
// drains the remaining backwards: at most p - s micro-batches' activations live at once instead of m.
// In the steady phase a stage receives the gradient of its oldest micro-batch before it sends its newest
// activation: the next stage sends that gradient before it receives that activation (Megatron pairs the two
// in one batched exchange instead).
// "interleaved_1f1b" (Megatron-LM's interleaved schedule; ScheduleInterleaved1F1B in torch.distributed.pipelining):
// each stage runs its chunks' forwards in Megatron's order (micro-batches in groups of `stages`: the group
// through chunk 0, then through chunk 1, ...; backwards the same with the chunks reversed), 2 (stages - s - 1)
// + (chunks - 1) x stages warm-up forwards, then one forward and one backward alternately, then the rest of the
// backwards: the bubble shrinks to (p - 1) / (chunks m + p - 1) of the step. The transfers are placed by playing
// all stages on one clock with blocking sends (a result goes when its receiver is between computations), so
// every stage's list is a part of one global order of transfers: blocking sends cannot deadlock on the ring,
// and no stage waits on its neighbour's computation. INVALID_ARGUMENT naming num_micro_batches when it is not
// a multiple of `stages` (as Megatron), or when pp_size is 1.
// INVALID_ARGUMENT for another name, or `chunks` other than 1 for "gpipe" and "1f1b".
std::vector<Op> stage_schedule(const std::string &schedule, int32_t stage, int32_t stages, int64_t micro_batches,
                               int32_t chunks = 1);

// The most micro-batches whose activations a stage holds at once under `ops` (forwards not yet backwarded;
// under interleaving, micro-batch chunks: each 1/chunks of the stage's layers).
int64_t peak_live_micro_batches(const std::vector<Op> &ops);

} // namespace accel::parallel::pp
