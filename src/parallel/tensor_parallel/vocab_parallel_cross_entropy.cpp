// The loss as one autograd Function (Megatron's _VocabParallelCrossEntropy): forward keeps only this rank's
// softmax columns for backward, so the memory is that of the local logits, never [B, T, V].
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "parallel/tensor_parallel/group_capsule.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"

#include <torch/csrc/autograd/custom_function.h>

#include <limits>
#include <string>

namespace accel::parallel::tp {

namespace {

using distributed::ReduceOp;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &logits, const at::Tensor &target,
                              const Group &group, int64_t vocab_start, int64_t vocab_size, int64_t ignore_index)
    {
        const int64_t local_v = logits.size(-1);
        // Reduced precision computes in float32 (as at::cross_entropy's log_softmax accumulates).
        at::Tensor x = logits.reshape({-1, local_v}).to(at::promote_types(logits.scalar_type(), at::kFloat));
        at::Tensor t = target.reshape({-1}).to(at::kLong);
        if (vocab_size >= 0 && vocab_start + local_v > vocab_size) { // padding columns: never predicted
            at::Tensor padding = at::arange(vocab_start, vocab_start + local_v, t.options()) >= vocab_size;
            x = x.masked_fill(padding.unsqueeze(0), -std::numeric_limits<float>::infinity());
        }
        at::Tensor max = std::get<0>(x.max(1));
        group->allreduce(max, ReduceOp::Max);
        at::Tensor shifted = x - max.unsqueeze(1);

        at::Tensor ignored = t == ignore_index;
        at::Tensor held = (t >= vocab_start).logical_and(t < vocab_start + local_v).logical_and(ignored.logical_not());
        at::Tensor local_t = (t - vocab_start).masked_fill(held.logical_not(), 0);
        at::Tensor predicted = shifted.gather(1, local_t.unsqueeze(1)).squeeze(1).masked_fill(held.logical_not(), 0.0);
        group->allreduce(predicted, ReduceOp::Sum);

        at::Tensor exp = shifted.exp_(); // shifted is no longer needed: the softmax is built in its storage
        at::Tensor sum_exp = exp.sum(1);
        group->allreduce(sum_exp, ReduceOp::Sum);
        at::Tensor loss = (sum_exp.log() - predicted).masked_fill(ignored, 0.0);
        exp.div_(sum_exp.unsqueeze(1));

        ctx->save_for_backward({exp, local_t, held, ignored});
        ctx->saved_data["shape"] = logits.sizes().vec();
        ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
        return loss.view(target.sizes()).to(logits.scalar_type());
    }

    static variable_list backward(AutogradContext *ctx, variable_list grad_outputs)
    {
        auto saved = ctx->get_saved_variables();
        at::Tensor grad = saved[0].clone(); // softmax of this rank's columns
        const at::Tensor &local_t = saved[1], &held = saved[2], &ignored = saved[3];
        grad.scatter_add_(1, local_t.unsqueeze(1), held.to(grad.scalar_type()).neg().unsqueeze(1));
        at::Tensor g = grad_outputs[0].reshape({-1}).to(grad.scalar_type()).masked_fill(ignored, 0.0);
        grad.mul_(g.unsqueeze(1));
        const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
        return {grad.view(ctx->saved_data["shape"].toIntVector()).to(dtype), at::Tensor(), at::Tensor(),
                at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

void check_target(const at::Tensor &logits, const at::Tensor &target, const Group &group,
                  const VocabParallelLossOptions &o)
{
    if (!group) fail(ACCEL_ERR_INTERNAL, "vocabulary-parallel loss: no tp group");
    if (!logits.defined() || logits.dim() < 1 || !at::isFloatingType(logits.scalar_type()))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "outputs: vocabulary-parallel cross-entropy takes floating-point logits [..., V/tp]");
    if (!target.defined() || at::isFloatingType(target.scalar_type()) ||
        target.sizes() != logits.sizes().slice(0, logits.dim() - 1))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: integer class ids shaped as the logits without their last dimension "
                                         "are needed, got " + c10::str(target.sizes()) + " for logits " +
                                             c10::str(logits.sizes()));
    const int64_t vocab = o.vocab_size >= 0 ? o.vocab_size : logits.size(-1) * group->size();
    at::Tensor t = target.reshape({-1});
    at::Tensor bad = t.ne(o.ignore_index).logical_and(t.lt(0).logical_or(t.ge(vocab)));
    if (bad.any().item<bool>())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: class id " + std::to_string(t.masked_select(bad)[0].item<int64_t>()) +
                                             " is outside [0, " + std::to_string(vocab) + ")");
}

} // namespace

at::Tensor vocab_parallel_cross_entropy_per_token(const at::Tensor &logits, const at::Tensor &target,
                                                  const Group &group, const VocabParallelLossOptions &options)
{
    check_target(logits, target, group, options);
    return VocabParallelCrossEntropy::apply(logits, target, group, options.vocab_start, options.vocab_size,
                                            options.ignore_index);
}

at::Tensor vocab_parallel_cross_entropy(const at::Tensor &logits, const at::Tensor &target, const Group &group,
                                        const VocabParallelLossOptions &options)
{
    at::Tensor per_token = vocab_parallel_cross_entropy_per_token(logits, target, group, options);
    at::Tensor counted = target.ne(options.ignore_index).sum().to(per_token.scalar_type());
    return per_token.sum() / counted;
}

} // namespace accel::parallel::tp
