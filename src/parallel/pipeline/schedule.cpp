#include "parallel/pipeline/schedule.hpp"

#include "common/error.hpp"

#include <algorithm>

namespace accel::parallel::pp {

namespace {

// Appends one micro-batch's forward or backward with the transfers this stage takes part in.
struct Builder {
    bool first, last;
    std::vector<Op> ops;
    void add(OpKind kind, int64_t micro, bool needed = true)
    {
        if (needed) ops.push_back({kind, micro});
    }
    void recv_activation(int64_t i) { add(OpKind::RecvActivation, i, !first); }
    void forward(int64_t i) { add(OpKind::Forward, i); }
    void send_activation(int64_t i) { add(OpKind::SendActivation, i, !last); }
    void recv_grad(int64_t i) { add(OpKind::RecvGrad, i, !last); }
    void backward(int64_t i)
    {
        add(OpKind::Backward, i);
        add(OpKind::SendGrad, i, !first);
    }
};

} // namespace

std::vector<Op> stage_schedule(const std::string &schedule, int32_t stage, int32_t stages, int64_t micro_batches)
{
    if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1)
        fail(ACCEL_ERR_INTERNAL, "pipeline: stage " + std::to_string(stage) + " of " + std::to_string(stages) + " with " +
                                     std::to_string(micro_batches) + " micro-batches");
    Builder b{stage == 0, stage == stages - 1, {}};
    const int64_t m = micro_batches;
    if (schedule == "gpipe") {
        for (int64_t i = 0; i < m; ++i) {
            b.recv_activation(i);
            b.forward(i);
            b.send_activation(i);
        }
        for (int64_t i = m - 1; i >= 0; --i) {
            b.recv_grad(i);
            b.backward(i);
        }
        return b.ops;
    }
    if (schedule == "1f1b") {
        const int64_t warmup = std::min<int64_t>(stages - stage - 1, m);
        for (int64_t i = 0; i < warmup; ++i) {
            b.recv_activation(i);
            b.forward(i);
            b.send_activation(i);
        }
        for (int64_t j = 0; j + warmup < m; ++j) { // steady: forward of j + warmup, backward of j
            b.recv_activation(j + warmup);
            b.forward(j + warmup);
            b.recv_grad(j);
            b.send_activation(j + warmup);
            b.backward(j);
        }
        for (int64_t j = std::max<int64_t>(m - warmup, 0); j < m; ++j) { // drain
            b.recv_grad(j);
            b.backward(j);
        }
        return b.ops;
    }
    fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.pp_schedule: \"" + schedule + "\" is not a schedule; "
                                     "use \"gpipe\" or \"1f1b\"");
}

int64_t peak_live_micro_batches(const std::vector<Op> &ops)
{
    int64_t live = 0, peak = 0;
    for (const Op &op : ops) {
        if (op.kind == OpKind::Forward) peak = std::max(peak, ++live);
        if (op.kind == OpKind::Backward) --live;
    }
    return peak;
}

} // namespace accel::parallel::pp
