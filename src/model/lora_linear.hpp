// LoRA as an implementation of the linear seam (model/linear.hpp): a decorator over a base Linear that adds
// the low-rank update of PEFT's lora.Linear,
//     y = base(x) + lora_B(lora_A(dropout(x))) * scaling,   lora_A: [r, in], lora_B: [out, r]
// The base layer's weight and bias are left as they are (frozen by apply_lora); A and B are registered by the
// model under "<module>.lora_A.weight" / "<module>.lora_B.weight" (src/model/lora.hpp).
#pragma once

#include "config/lora_config.hpp"
#include "model/linear.hpp"

#include <functional>
#include <memory>

namespace accel::parallel::tp {
class DropoutGenerator;
}
#include <string>

namespace accel {

class LoraLinear final : public Linear {
public:
    // `training`: whether the model is in training mode (dropout applies only then). `config`: the settings it
    // was made with (target_modules as applied), for adapter_config.json.
    LoraLinear(std::shared_ptr<Linear> base, at::Tensor lora_a, at::Tensor lora_b,
               std::shared_ptr<const config::LoraConfig> config, std::function<bool()> training);

    at::Tensor forward(const at::Tensor &input) override;
    const at::Tensor &weight() const override { return base_->weight(); }
    const at::Tensor &bias() const override { return base_->bias(); }
    Layout layout() const override { return base_->layout(); }
    bool stateful_forward() const override { return base_->stateful_forward(); }
    std::vector<at::Tensor> added_parameters() const override { return {lora_a_, lora_b_}; }
    bool random_forward() const override { return dropout_ > 0.0 || base_->random_forward(); }

    const std::shared_ptr<Linear> &base() const { return base_; }
    // Replaces the base layer by one of the same shape (accel_model_quantize quantizes a base under its adapters:
    // QLoRA's 4-bit base with float adapters).
    void set_base(std::shared_ptr<Linear> base) { base_ = std::move(base); }
    // Tensor parallelism: applied to lora_A's output before lora_B (parallel/tensor_parallel/plan_linear.hpp:
    // the collective that makes the split adapter's gradients whole); none by default.
    void set_adapter_mapping(std::function<at::Tensor(const at::Tensor &)> mapping) { mapping_ = std::move(mapping); }
    // Tensor parallelism of a row-parallel base: its input is this rank's features, so lora_dropout draws from the
    // rank's generator (rng_tracker.hpp); null (the default): from the default generator.
    void set_split_dropout(std::shared_ptr<parallel::tp::DropoutGenerator> g) { split_dropout_ = std::move(g); }
    const at::Tensor &lora_a() const { return lora_a_; }
    const at::Tensor &lora_b() const { return lora_b_; }
    double scaling() const { return scaling_; }
    const config::LoraConfig &config() const { return *config_; }
    // scaling * B A in the base weight's layout ([out, in], or [in, out] for Conv1D), float32, from the given
    // A and B (the layer's own by default; a gathered copy when the model's are sharded).
    at::Tensor delta_weight(const at::Tensor &a, const at::Tensor &b) const;

private:
    std::shared_ptr<Linear> base_;
    at::Tensor lora_a_, lora_b_;
    std::shared_ptr<const config::LoraConfig> config_;
    double scaling_, dropout_;
    std::function<bool()> training_;
    std::function<at::Tensor(const at::Tensor &)> mapping_;
    std::shared_ptr<parallel::tp::DropoutGenerator> split_dropout_;
};

} // namespace accel
