// fsdp_plugin.activation_checkpointing: prepare marks for recomputation the layers the wrap policy made
// units (Accelerate applies activation checkpointing with the wrap policy), every layer under NO_WRAP;
// training with it equals training without it bit for bit (one process; tests/distributed compares
// 2 processes against DDP).
#include "accelerator/accelerator.hpp"
#include "common/error.hpp"
#include "config/optimizer_config.hpp"
#include "model/model.hpp"
#include "ops/loss.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "precision/autocast.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace {

const char *kSpec = R"({"type": "sequential", "layers": [
    {"type": "transformer_encoder_layer", "d_model": 8, "nhead": 2, "dim_feedforward": 16, "dropout": 0.1,
     "batch_first": true},
    {"type": "flatten"}, {"type": "linear", "in_features": 32, "out_features": 3}]})";

// Weights after 3 AdamW steps of a FULL_SHARD model with this fsdp_plugin, and whether prepare turned
// recomputation on.
std::pair<at::Tensor, bool> train(const std::string &plugin)
{
    at::manual_seed(1);
    auto acc = std::make_unique<accel::Accelerator>(("{\"fsdp_plugin\": {" + plugin + "}}").c_str());
    auto model = accel::make_model_from_json(kSpec);
    auto opt = std::make_shared<accel::AcceleratedOptimizer>(
        model, accel::config::parse_optimizer_config(R"({"type": "adamw", "lr": 0.01})"));
    acc->prepare_model(model);
    acc->prepare_optimizer(opt);
    at::manual_seed(2);
    for (int step = 0; step < 3; ++step) {
        at::Tensor x = at::randn({4, 4, 8}), y = at::randn({4, 3});
        acc->backward(accel::compute_loss(accel::LossKind::Mse, accel::forward(*model, x, true), y));
        opt->step();
        opt->zero_grad();
    }
    const bool on = model->activation_checkpointing();
    acc->summon_full_params(*model, true);
    at::Tensor flat = at::cat({model->named_parameters().front().second.detach().reshape({-1}).clone(),
                               model->named_parameters().back().second.detach().reshape({-1}).clone()});
    acc->summon_full_params(*model, false);
    return {flat, on};
}

TEST(ActivationCheckpointing, FollowsTheWrapPolicyAndChangesNoResult)
{
    const auto [plain, plain_on] = train("\"auto_wrap_policy\": \"NO_WRAP\"");
    EXPECT_FALSE(plain_on);
    for (const std::string policy :
         {"\"auto_wrap_policy\": \"NO_WRAP\"",
          "\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", \"transformer_cls_names_to_wrap\": [\"transformer_encoder_layer\"]"}) {
        const auto [w, on] = train(policy + ", \"activation_checkpointing\": true");
        EXPECT_TRUE(on) << policy;
        EXPECT_TRUE(at::equal(w, plain)) << policy;
    }
    // A size policy that makes no unit: nothing is recomputed (as in Accelerate).
    const auto [w, on] = train("\"auto_wrap_policy\": \"SIZE_BASED_WRAP\", \"min_num_params\": 100000000, "
                               "\"activation_checkpointing\": true");
    EXPECT_FALSE(on);
    EXPECT_TRUE(at::equal(w, plain));
}

} // namespace
