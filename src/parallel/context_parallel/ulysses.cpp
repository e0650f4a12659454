#include "parallel/context_parallel/ulysses.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/tensor_parallel/group_capsule.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <string>

namespace accel::parallel::cp {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int32_t kUlyssesTag = 7302; // NCCL ignores tags: every rank runs the pairs in the same order

// Forward of sequence_to_heads without autograd: head share j of this rank's part goes to rank j; the parts
// that come back (rank i's part of the sequence, this rank's heads) are put in whole-sequence order.
at::Tensor to_heads(const at::Tensor &x, distributed::Communicator &g)
{
    std::vector<at::Tensor> parts;
    for (const at::Tensor &p : x.chunk(g.size(), 1)) parts.push_back(p.contiguous());
    return unshard_sequence(all_to_all(std::move(parts), g), 2);
}

// Forward of heads_to_sequence: rank j's part of the whole sequence goes to rank j; the head shares that come
// back (this rank's part, rank i's heads) are concatenated in rank order.
at::Tensor to_sequence(const at::Tensor &y, distributed::Communicator &g)
{
    std::vector<at::Tensor> parts;
    for (int32_t j = 0; j < g.size(); ++j) parts.push_back(shard_sequence(y, 2, j, g.size()).contiguous());
    return at::cat(all_to_all(std::move(parts), g), 1);
}

struct SequenceToHeads : torch::autograd::Function<SequenceToHeads> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &x, const SpGroup &group)
    {
        ctx->saved_data["group"] = tp::group_capsule(group);
        return to_heads(x, *group);
    }
    static variable_list backward(AutogradContext *ctx, variable_list grads)
    {
        return {to_sequence(grads[0], tp::capsule_group(ctx->saved_data["group"])), at::Tensor()};
    }
};

struct HeadsToSequence : torch::autograd::Function<HeadsToSequence> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &y, const SpGroup &group)
    {
        ctx->saved_data["group"] = tp::group_capsule(group);
        return to_sequence(y, *group);
    }
    static variable_list backward(AutogradContext *ctx, variable_list grads)
    {
        return {to_heads(grads[0], tp::capsule_group(ctx->saved_data["group"])), at::Tensor()};
    }
};

} // namespace

std::vector<at::Tensor> all_to_all(std::vector<at::Tensor> parts, distributed::Communicator &group)
{
    const int32_t n = group.size(), r = group.rank();
    if (static_cast<int32_t>(parts.size()) != n)
        fail(ACCEL_ERR_INTERNAL, "all_to_all: " + std::to_string(parts.size()) + " parts for a group of " + std::to_string(n));
    // Pairs (a, b), a < b, in lexicographic order: the smallest pair not yet exchanged always has both its
    // ranks waiting on it, so the exchange cannot deadlock.
    for (int32_t a = 0; a < n; ++a)
        for (int32_t b = a + 1; b < n; ++b) {
            if (r != a && r != b) continue;
            const int32_t peer = r == a ? b : a;
            at::Tensor &mine = parts[static_cast<size_t>(peer)];
            at::Tensor in = at::empty_like(mine);
            if (r == a) {
                group.send(mine, peer, kUlyssesTag);
                group.recv(in, peer, kUlyssesTag);
            } else {
                group.recv(in, peer, kUlyssesTag);
                group.send(mine, peer, kUlyssesTag);
            }
            mine = in;
        }
    return parts;
}

at::Tensor sequence_to_heads(const at::Tensor &x, const SpGroup &group, const char *what)
{
    const int32_t n = group->size();
    if (x.dim() != 4 || x.size(1) % n != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(what) + ": Ulysses sequence parallelism gives each of sp_size = " +
                                             std::to_string(n) + " ranks whole heads, but this rank's attention has " +
                                             (x.dim() == 4 ? std::to_string(x.size(1)) : c10::str(x.sizes())) +
                                             " heads; the heads (and key/value heads, per tensor-parallel rank) must "
                                             "divide by sp_size");
    if (n == 1) return x;
    return SequenceToHeads::apply(x, group);
}

at::Tensor heads_to_sequence(const at::Tensor &y, const SpGroup &group)
{
    if (group->size() == 1) return y;
    return HeadsToSequence::apply(y, group);
}

} // namespace accel::parallel::cp
