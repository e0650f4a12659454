#include "ops/loss.hpp"

#include "common/error.hpp"
#include "parallel/context_parallel/loss.hpp"
#include "config/loss_config.hpp"
#include "parallel/tensor_parallel/split_outputs.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"
#include "state/device.hpp"

#include <ATen/core/Reduction.h>

#include <cstring>

namespace accel {

namespace {
const char *kind_name(LossKind k)
{
    switch (k) {
    case LossKind::CrossEntropy: return "cross_entropy";
    case LossKind::Nll: return "nll";
    case LossKind::Mse: return "mse";
    case LossKind::L1: return "l1";
    case LossKind::SmoothL1: return "smooth_l1";
    case LossKind::CausalLm: return "causal_lm";
    default: return "bce_with_logits";
    }
}

std::string dtype_name(const at::Tensor &t) { return c10::toString(t.scalar_type()); }
} // namespace

LossKind parse_loss_name(const char *name)
{
    if (name == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "loss_name: must not be NULL");
    for (LossKind k : {LossKind::CrossEntropy, LossKind::Nll, LossKind::Mse, LossKind::L1, LossKind::SmoothL1,
                       LossKind::BceWithLogits, LossKind::CausalLm})
        if (std::strcmp(name, kind_name(k)) == 0) return k;
    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("loss_name: expected one of \"cross_entropy\", \"nll\", \"mse\", \"l1\", "
                                                 "\"smooth_l1\", \"bce_with_logits\", \"causal_lm\" or a JSON "
                                                 "object {\"type\": ..., \"ignore_index\": ...}, got \"") +
                                         name + "\"");
}

Loss parse_loss(const char *name)
{
    if (name == nullptr || name[0] != '{') return parse_loss_name(name);
    config::LossConfig c = config::parse_loss_config(name);
    Loss l = parse_loss_name(c.type.c_str());
    if (c.ignore_index) l.ignore_index = *c.ignore_index;
    return l;
}

namespace {
// The loss over this process's outputs (all of them, or under context parallelism its part of the sequence).
at::Tensor local_loss(const Loss &spec, const at::Tensor &outputs, const at::Tensor &given_targets)
{
    // Labels from the host meet outputs on the model's device.
    const at::Tensor targets = outputs.defined() ? send_to_device(given_targets, outputs.device()) : given_targets;
    const LossKind kind = spec.kind;
    const std::string loss = kind_name(kind);
    if (!outputs.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "outputs: missing");
    if (!targets.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: missing (the batch has no labels)");
    if (!outputs.is_floating_point())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "outputs: " + loss + " needs floating outputs, got " + dtype_name(outputs));
    const int64_t mean = at::Reduction::Mean;
    if (auto split = parallel::tp::vocab_parallel_of(outputs)) {
        // A tensor-parallel model's logits hold this rank's vocabulary columns only.
        if (kind != LossKind::CausalLm && kind != LossKind::CrossEntropy)
            fail(ACCEL_ERR_UNIMPLEMENTED, "loss: " + loss + " of logits split over the vocabulary by tensor parallelism "
                                          "is not built (causal_lm and cross_entropy are)");
        if (targets.scalar_type() != at::kLong)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: " + loss + " needs int64 token ids, got " + dtype_name(targets));
        parallel::tp::VocabParallelLossOptions o;
        o.vocab_start = split->vocab_start;
        o.vocab_size = split->vocab_size;
        o.ignore_index = spec.ignore_index;
        return parallel::tp::vocab_parallel_cross_entropy(outputs, targets, split->group, o);
    }
    if (kind == LossKind::CausalLm) {
        // Logits [..., V] against next-token labels [...] (the token data loader's labels are already
        // shifted; HF's GPT2LMHeadModel shifts labels = input_ids itself). Positions labelled
        // ignore_index do not count in the mean.
        if (targets.scalar_type() != at::kLong)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: causal_lm needs int64 token ids, got " + dtype_name(targets));
        if (outputs.dim() < 2 || targets.sizes() != outputs.sizes().slice(0, outputs.dim() - 1))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: causal_lm needs outputs [..., V] and targets [...] of the "
                                             "outputs' leading shape, got outputs " + c10::str(outputs.sizes()) +
                                                 " and targets " + c10::str(targets.sizes()));
        return at::cross_entropy_loss(outputs.reshape({-1, outputs.size(-1)}), targets.reshape({-1}), {}, mean,
                                      spec.ignore_index, 0.0);
    }
    if (kind == LossKind::CrossEntropy || kind == LossKind::Nll) {
        if (targets.scalar_type() != at::kLong)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: " + loss + " needs int64 class indices, got " + dtype_name(targets));
        if (outputs.dim() != 2 || targets.dim() != 1 || outputs.size(0) != targets.size(0))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: " + loss + " needs outputs [N, C] and targets [N], got outputs " +
                                                 c10::str(outputs.sizes()) + " and targets " + c10::str(targets.sizes()));
        return kind == LossKind::CrossEntropy ? at::cross_entropy_loss(outputs, targets, {}, mean, spec.ignore_index, 0.0)
                                              : at::nll_loss(outputs, targets, {}, mean, spec.ignore_index);
    }
    if (!targets.is_floating_point())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: " + loss + " needs floating targets, got " + dtype_name(targets));
    if (outputs.sizes() != targets.sizes())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "targets: " + loss + " needs targets of the outputs' shape " +
                                             c10::str(outputs.sizes()) + ", got " + c10::str(targets.sizes()));
    at::Tensor t = targets.scalar_type() == outputs.scalar_type() ? targets : targets.to(outputs.scalar_type());
    switch (kind) {
    case LossKind::Mse: return at::mse_loss(outputs, t, mean);
    case LossKind::L1: return at::l1_loss(outputs, t, mean);
    case LossKind::SmoothL1: return at::smooth_l1_loss(outputs, t, mean, 1.0);
    default: return at::binary_cross_entropy_with_logits(outputs, t, {}, {}, mean);
    }
}

} // namespace

at::Tensor compute_loss(const Loss &spec, const at::Tensor &outputs, const at::Tensor &targets)
{
    at::Tensor local = local_loss(spec, outputs, targets);
    auto group = parallel::cp::context_parallel_of(outputs);
    if (!group) return local;
    // A context-parallel model's outputs cover this rank's part of every sequence: the mean over the whole batch
    // from every rank's sum and count of the positions the loss counts.
    const bool indexed = spec.kind == LossKind::CausalLm || spec.kind == LossKind::CrossEntropy || spec.kind == LossKind::Nll;
    const at::Tensor count = indexed ? (targets != spec.ignore_index).sum().to(at::kDouble)
                                     : at::full({}, static_cast<double>(outputs.numel()), at::kDouble);
    return parallel::cp::whole_sequence_loss(local, count.to(local.device()), *group);
}

} // namespace accel
