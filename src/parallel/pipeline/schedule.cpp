#include "parallel/pipeline/schedule.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <set>
#include <tuple>

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

// Megatron's order of one stage's computations under interleaving: forward k is micro-batch
// (k / (p v)) p + k % p through chunk (k % (p v)) / p; backward k the same micro-batch through the chunks
// counted from the last. Warm-up forwards, then forward and backward alternately, then the remaining backwards.
struct Compute {
    bool forward;
    int64_t micro;
    int32_t chunk;
};

std::vector<Compute> interleaved_order(int32_t stage, int32_t p, int64_t m, int32_t v)
{
    const int64_t total = m * v, group = static_cast<int64_t>(p) * v;
    auto at = [&](int64_t k, bool forward) {
        const auto c = static_cast<int32_t>((k % group) / p);
        return Compute{forward, (k / group) * p + k % p, forward ? c : v - 1 - c};
    };
    const int64_t warmup = std::min<int64_t>(2 * (p - stage - 1) + static_cast<int64_t>(v - 1) * p, total);
    std::vector<Compute> order;
    for (int64_t k = 0; k < warmup; ++k) order.push_back(at(k, true));
    for (int64_t k = 0; k + warmup < total; ++k) {
        order.push_back(at(k + warmup, true));
        order.push_back(at(k, false));
    }
    for (int64_t k = std::max<int64_t>(total - warmup, 0); k < total; ++k) order.push_back(at(k, false));
    return order;
}

// Plays every stage's computations on one clock (a forward takes 1 unit, a backward 2) with sends that block
// until their receive is posted, and lists stage `stage`'s ops in the order they happened. At each moment,
// first every result waiting to be sent goes to a receiver that is between computations (no stage waits on a
// neighbour's computation: the bubble stays the schedule's own, (p - 1) / (v m + p - 1)), then every stage
// between computations whose next computation has its input starts it. All stages' lists are parts of that
// one order of transfers, so blocking sends cannot deadlock on the ring.
std::vector<Op> interleaved_schedule(int32_t stage, int32_t p, int64_t m, int32_t v)
{
    const int32_t V = p * v;
    std::vector<std::vector<Compute>> orders;
    for (int32_t s = 0; s < p; ++s) orders.push_back(interleaved_order(s, p, m, v));
    struct Message {
        bool activation;
        int32_t from, to; // virtual stages
        int64_t micro;
    };
    std::vector<std::vector<Message>> outbox(static_cast<size_t>(p));
    std::set<std::tuple<bool, int32_t, int64_t>> arrived; // (activation, virtual stage, micro)
    std::vector<size_t> next(static_cast<size_t>(p), 0);
    std::vector<int64_t> busy_until(static_cast<size_t>(p), 0);
    std::vector<Op> ops;
    auto unfinished = [&] {
        for (int32_t s = 0; s < p; ++s)
            if (next[static_cast<size_t>(s)] < orders[static_cast<size_t>(s)].size() || !outbox[static_cast<size_t>(s)].empty()) return true;
        return false;
    };
    const int64_t limit = 4 * m * v + 4 * V; // more than the schedule's length: past it the order waits on itself
    for (int64_t t = 0; unfinished(); ++t) {
        if (t > limit) fail(ACCEL_ERR_INTERNAL, "pipeline: the interleaved order waits on itself");
        auto idle = [&](int32_t s) { return busy_until[static_cast<size_t>(s)] <= t; };
        for (bool moved = true; moved;) {
            moved = false;
            for (int32_t s = 0; s < p; ++s) {
                auto &box = outbox[static_cast<size_t>(s)];
                if (!idle(s)) continue;
                for (auto it = box.begin(); it != box.end(); ++it) {
                    const VirtualStage dst{it->to % p, it->to / p};
                    if (!idle(dst.stage)) continue;
                    const int64_t i = it->micro;
                    arrived.insert({it->activation, it->to, i});
                    if (s == stage) ops.push_back({it->activation ? OpKind::SendActivation : OpKind::SendGrad, i, it->from / p});
                    if (dst.stage == stage) ops.push_back({it->activation ? OpKind::RecvActivation : OpKind::RecvGrad, i, dst.chunk});
                    box.erase(it);
                    moved = true;
                    break;
                }
            }
        }
        for (int32_t s = 0; s < p; ++s) {
            const auto &order = orders[static_cast<size_t>(s)];
            auto &k = next[static_cast<size_t>(s)];
            if (!idle(s) || k == order.size()) continue;
            const Compute &c = order[k];
            const int32_t vs = c.chunk * p + s;
            const bool ready = c.forward ? vs == 0 || arrived.count({true, vs, c.micro}) > 0
                                         : vs == V - 1 || arrived.count({false, vs, c.micro}) > 0;
            if (!ready) continue;
            busy_until[static_cast<size_t>(s)] = t + (c.forward ? 1 : 2);
            ++k;
            if (s == stage) ops.push_back({c.forward ? OpKind::Forward : OpKind::Backward, c.micro, c.chunk});
            const int32_t to = c.forward ? vs + 1 : vs - 1; // where the result goes, if anywhere
            if (to >= 0 && to < V) outbox[static_cast<size_t>(s)].push_back({c.forward, vs, to, c.micro});
        }
    }
    return ops;
}

} // namespace

VirtualStage next_virtual_stage(int32_t stage, int32_t chunk, int32_t stages)
{
    return stage + 1 < stages ? VirtualStage{stage + 1, chunk} : VirtualStage{0, chunk + 1};
}

VirtualStage previous_virtual_stage(int32_t stage, int32_t chunk, int32_t stages)
{
    return stage > 0 ? VirtualStage{stage - 1, chunk} : VirtualStage{stages - 1, chunk - 1};
}

std::vector<Op> stage_schedule(const std::string &schedule, int32_t stage, int32_t stages, int64_t micro_batches,
                               int32_t chunks)
{
    if (stages < 1 || stage < 0 || stage >= stages || micro_batches < 1 || chunks < 1)
        fail(ACCEL_ERR_INTERNAL, "pipeline: stage " + std::to_string(stage) + " of " + std::to_string(stages) + " with " +
                                     std::to_string(micro_batches) + " micro-batches and " + std::to_string(chunks) + " chunks");
    const int64_t m = micro_batches;
    if (schedule == "interleaved_1f1b") {
        if (stages < 2)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.pp_schedule: \"interleaved_1f1b\" needs pp_size 2 at least");
        if (m % stages != 0) // Megatron's condition: the micro-batches go through the chunks in groups of pp_size
            fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.num_micro_batches: " + std::to_string(m) +
                                                 " is not a multiple of pp_size (" + std::to_string(stages) +
                                                 "), which the \"interleaved_1f1b\" schedule needs");
        return interleaved_schedule(stage, stages, m, chunks);
    }
    if (chunks != 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config: " + std::to_string(chunks) + " model chunks per stage (virtual "
                                         "pipeline stages) need pp_schedule \"interleaved_1f1b\", not \"" + schedule + "\"");
    Builder b{stage == 0, stage == stages - 1, {}};
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
                                     "use \"gpipe\", \"1f1b\" or \"interleaved_1f1b\"");
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
