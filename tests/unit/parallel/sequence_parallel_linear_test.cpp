// Sequence parallelism's column layer (src/parallel/tensor_parallel/parallel_linear.cpp) keeps only its input's
// sequence shard for backward and all-gathers it again there, as Megatron-LM does. What it computes must be what
// the sequence all-gather followed by the plain layer computes (the graph autograd builds, which keeps the
// gathered input): outputs and every gradient bit for bit, on thread ranks; and after the forward it holds the
// gathered inputs less. About 0.1 s.
#include "common/memory_budget.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"
#include "model/linear.hpp"
#include "parallel/tensor_parallel/mappings.hpp"
#include "parallel/tensor_parallel/parallel_linear.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "precision/autocast.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dist = accel::distributed;
namespace tp = accel::parallel::tp;
using accel::Linear;

namespace {

at::Tensor leaf(const at::Tensor &t) { return t.detach().clone().requires_grad_(true); }

struct Case {
    Linear::Layout layout;
    bool bias;
    bool batched;  // [B, T, C] split along T (the models' layout), else [T, C] split along T
    bool autocast; // bf16 autocast around the forward, as a prepared model's forward under mixed precision
};

std::string name(const Case &c, int32_t world)
{
    return std::string(c.layout == Linear::Layout::InOut ? "InOut" : "OutIn") + (c.bias ? " with bias" : " no bias") +
           (c.batched ? " [B, T, C]" : " [T, C]") + (c.autocast ? " bf16 autocast" : " float32") + " tp " +
           std::to_string(world);
}

void check_bit_for_bit(int32_t world, const Case &c)
{
    at::manual_seed(21);
    const int64_t C = 8, H = 12, T = 4 * world;
    const at::Tensor w = c.layout == Linear::Layout::InOut ? at::randn({C, H}) : at::randn({H, C});
    const at::Tensor b = c.bias ? at::randn({H}) : at::Tensor();
    const at::Tensor x = c.batched ? at::randn({3, T, C}) : at::randn({T, C});
    const at::Tensor gy = c.batched ? at::randn({3, T, H}) : at::randn({T, H});
    const int64_t dim = c.batched ? 1 : 0;
    const std::string what = name(c, world);
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        const at::Tensor w_part = tp::slice(w, tp::output_dim(c.layout), r, world);
        const at::Tensor b_part = c.bias ? tp::slice(b, 0, r, world) : at::Tensor();
        at::Tensor lw = leaf(w_part), rw = leaf(w_part), lx = leaf(tp::slice(x, dim, r, world)), rx = leaf(lx);
        at::Tensor lb = c.bias ? leaf(b_part) : at::Tensor(), rb = c.bias ? leaf(b_part) : at::Tensor();
        auto layer = tp::make_column_parallel_linear(accel::make_linear(lw, lb, c.layout), comm, {false, dim});
        at::Tensor y, ry;
        {
            std::optional<accel::AutocastScope> autocast;
            if (c.autocast) autocast.emplace(at::kCPU, at::kBFloat16, true);
            y = layer->forward(lx);
            ry = accel::make_linear(rw, rb, c.layout)->forward(tp::gather_sequence(rx, comm, dim));
        }
        const at::Tensor g = tp::slice(gy, gy.dim() - 1, r, world).to(ry.scalar_type());
        y.backward(g);
        ry.backward(g);
        const std::string at_rank = what + " (rank " + std::to_string(r) + ")";
        EXPECT_EQ(y.scalar_type(), ry.scalar_type()) << at_rank;
        EXPECT_TRUE(at::equal(y, ry)) << at_rank << ": output";
        EXPECT_TRUE(at::equal(lx.grad(), rx.grad())) << at_rank << ": input gradient";
        EXPECT_TRUE(at::equal(lw.grad(), rw.grad())) << at_rank << ": weight gradient";
        EXPECT_EQ(lw.grad().strides(), rw.grad().strides()) << at_rank << ": weight gradient's layout";
        if (c.bias) {
            EXPECT_TRUE(at::equal(lb.grad(), rb.grad())) << at_rank << ": bias gradient";
        }
    });
}

TEST(SequenceParallelLinear, KeepsTheShardWithAutogradsGradientsBitForBit)
{
    for (int32_t world : {2, 4})
        for (auto layout : {Linear::Layout::InOut, Linear::Layout::OutIn})
            for (bool bias : {true, false})
                for (bool batched : {true, false})
                    for (bool autocast : {false, true}) check_bit_for_bit(world, {layout, bias, batched, autocast});
}

// A frozen weight (requires_grad false): no weight gradient, the input's and the bias's as autograd's.
TEST(SequenceParallelLinear, FrozenWeight)
{
    const int32_t world = 2;
    at::manual_seed(23);
    const at::Tensor w = at::randn({12, 8}), b = at::randn({12}), x = at::randn({2, 8, 8}), gy = at::randn({2, 8, 12});
    dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
        const int32_t r = comm->rank();
        const at::Tensor lw = tp::slice(w, 0, r, world), lb = tp::slice(b, 0, r, world);
        at::Tensor bias = leaf(lb), rbias = leaf(lb), lx = leaf(tp::slice(x, 1, r, world)), rx = leaf(lx);
        auto layer = tp::make_column_parallel_linear(accel::make_linear(lw, bias, Linear::Layout::OutIn), comm, {false, 1});
        at::Tensor y = layer->forward(lx);
        at::Tensor ry = accel::make_linear(lw, rbias, Linear::Layout::OutIn)->forward(tp::gather_sequence(rx, comm, 1));
        const at::Tensor g = tp::slice(gy, 2, r, world);
        y.backward(g);
        ry.backward(g);
        EXPECT_FALSE(lw.grad().defined());
        EXPECT_TRUE(at::equal(lx.grad(), rx.grad())) << "input gradient (rank " << r << ")";
        EXPECT_TRUE(at::equal(bias.grad(), rbias.grad())) << "bias gradient (rank " << r << ")";
    });
}

// The bytes held after the forward (both ranks, the inputs made before): the gathered input [B, T, C] is no longer
// among them.
TEST(SequenceParallelLinear, HoldsNoGatheredInput)
{
    const int32_t world = 2;
    const int64_t B = 2, T = 64, C = 32, H = 16;
    at::manual_seed(22);
    const at::Tensor w = at::randn({C, H}), x = at::randn({B, T, C});
    std::vector<at::Tensor> xs, ws;
    for (int32_t r = 0; r < world; ++r) {
        xs.push_back(leaf(tp::slice(x, 1, r, world)));
        ws.push_back(leaf(tp::slice(w, 1, r, world)));
    }
    auto held_after_forward = [&](bool keep_shard) {
        std::vector<at::Tensor> ys(world);
        accel::MemoryBudgetScope count(UINT64_MAX);
        dist::run_on_threads(world, [&](const std::shared_ptr<dist::Communicator> &comm) {
            const auto r = static_cast<size_t>(comm->rank());
            auto local = accel::make_linear(ws[r], at::Tensor(), Linear::Layout::InOut);
            ys[r] = keep_shard ? tp::make_column_parallel_linear(local, comm, {false, 1})->forward(xs[r])
                               : local->forward(tp::gather_sequence(xs[r], comm, 1));
        });
        return count.held_bytes();
    };
    const uint64_t gathered = static_cast<uint64_t>(world) * B * T * C * sizeof(float); // one per rank
    const uint64_t autograd = held_after_forward(false), kept_shard = held_after_forward(true);
    EXPECT_GE(autograd, kept_shard + gathered) << autograd << " bytes held with the gathered input, " << kept_shard
                                               << " with the shard";
}

} // namespace
