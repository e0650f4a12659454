#include "model/lora_linear.hpp"

#include "common/error.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"

namespace accel {

LoraLinear::LoraLinear(std::shared_ptr<Linear> base, at::Tensor lora_a, at::Tensor lora_b,
                       std::shared_ptr<const config::LoraConfig> config, std::function<bool()> training)
    : base_(std::move(base)), lora_a_(std::move(lora_a)), lora_b_(std::move(lora_b)), config_(std::move(config)),
      scaling_(config_->scaling()), dropout_(config_->lora_dropout), training_(std::move(training))
{
    if (!base_ || lora_a_.dim() != 2 || lora_b_.dim() != 2 || lora_a_.size(0) != lora_b_.size(1) ||
        lora_a_.size(1) != base_->in_features() || lora_b_.size(0) != base_->out_features())
        fail(ACCEL_ERR_INTERNAL, "lora: adapter shapes do not fit the layer");
}

at::Tensor LoraLinear::forward(const at::Tensor &x)
{
    at::Tensor y = base_->forward(x);
    // PEFT casts the input to the adapters' dtype (float32 adapters over a bf16 base) and the update back to the
    // result's; under autocast both matmuls run in the autocast dtype anyway.
    at::Tensor in = x.scalar_type() == lora_a_.scalar_type() || !x.is_floating_point() ? x : x.to(lora_a_.scalar_type());
    in = parallel::tp::region_dropout(in, dropout_, training_(), split_dropout_);
    at::Tensor low = at::linear(in, lora_a_);
    if (mapping_) low = mapping_(low);
    at::Tensor update = at::linear(low, lora_b_) * scaling_;
    return y + (update.scalar_type() == y.scalar_type() ? update : update.to(y.scalar_type()));
}

at::Tensor LoraLinear::delta_weight(const at::Tensor &a, const at::Tensor &b) const
{
    at::Tensor delta = at::mm(b.to(at::kFloat), a.to(at::kFloat)) * scaling_; // [out, in]
    return layout() == Layout::OutIn ? delta : delta.t().contiguous();
}

} // namespace accel
