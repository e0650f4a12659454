// MegatronLMPlugin's recompute_activation (issue 36): Megatron's --recompute-activations is selective
// recomputation, which prepare turns on for the gpt and llama models (model/selective_recompute.hpp).
//  - A model prepared under the plugin holds, after a training forward, exactly what the same model built with
//    "recompute_granularity": "selective" holds, and less than without it by at least the attention scores.
//  - Its training equals the one built with the key bit for bit.
//  - Other models are refused at prepare, naming the key.
#include "c_api/handles.hpp"
#include "common/memory_budget.hpp"
#include "model/gpt_model.hpp"
#include "model/llama_model.hpp"
#include "model/model.hpp"
#include "model/selective_recompute.hpp"
#include "ops/loss.hpp"

#include <accel/accel.h>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adamw.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

const std::string kGpt = R"({"type": "gpt", "vocab_size": 37, "n_embd": 16, "n_layer": 2, "n_head": 4,
    "n_positions": 64, "attn_pdrop": 0.0, "resid_pdrop": 0.0, "embd_pdrop": 0.0)";
const std::string kLlama = R"({"type": "llama", "vocab_size": 37, "hidden_size": 16, "intermediate_size": 24,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "initializer_range": 0.2)";

std::shared_ptr<accel::Model> build(const std::string &spec, bool selective)
{
    at::manual_seed(81);
    return accel::make_model_from_json((spec + (selective ? R"(, "recompute_granularity": "selective"})" : "}")).c_str());
}

// The model prepared by an accelerator created with megatron_lm_plugin.recompute_activation true; the status.
accel_status_t prepare_under_plugin(const std::shared_ptr<accel::Model> &model)
{
    accel_accelerator_t *acc = nullptr;
    if (accel_accelerator_create(R"({"megatron_lm_plugin": {"recompute_activation": true, "gradient_clipping": 0}})",
                                 &acc) != ACCEL_OK)
        return ACCEL_ERR_INTERNAL;
    accel_model m{model};
    const accel_status_t st = accel_accelerator_prepare_model(acc, &m);
    accel_accelerator_free(acc);
    return st;
}

uint64_t held_after_forward(accel::Model &m, const at::Tensor &ids, const at::Tensor &labels)
{
    m.train(true);
    accel::MemoryBudgetScope count(UINT64_MAX);
    at::Tensor loss = accel::compute_loss(accel::Loss(accel::LossKind::CausalLm), m.forward(ids), labels);
    const uint64_t held = count.held_bytes();
    loss.backward();
    return held;
}

std::vector<at::Tensor> train(accel::Model &m, int steps)
{
    at::manual_seed(82);
    const at::Tensor ids = at::randint(0, 37, {steps, 2, 8}, at::kLong), labels = at::randint(0, 37, {steps, 2, 8}, at::kLong);
    torch::optim::AdamW opt(m.parameters(), torch::optim::AdamWOptions(1e-2));
    m.train(true);
    for (int s = 0; s < steps; ++s) {
        accel::compute_loss(accel::Loss(accel::LossKind::CausalLm), m.forward(ids[s]), labels[s]).backward();
        opt.step();
        opt.zero_grad();
    }
    std::vector<at::Tensor> out;
    for (const auto &p : m.parameters()) out.push_back(p.detach().clone());
    return out;
}

} // namespace

TEST(MegatronRecompute, PreparedModelHoldsWhatTheSelectiveSpecHolds)
{
    constexpr int64_t B = 2, T = 64, H = 4, kLayers = 2;
    at::manual_seed(83);
    const at::Tensor ids = at::randint(0, 37, {B, T}, at::kLong), labels = at::randint(0, 37, {B, T}, at::kLong);
    const uint64_t scores = static_cast<uint64_t>(kLayers * B * H * T * T) * sizeof(float);
    for (const std::string &spec : {kGpt, kLlama}) {
        const auto prepared = build(spec, false);
        ASSERT_EQ(prepare_under_plugin(prepared), ACCEL_OK) << accel_last_error_message();
        const uint64_t plain = held_after_forward(*build(spec, false), ids, labels);
        const uint64_t with_key = held_after_forward(*build(spec, true), ids, labels);
        const uint64_t mapped = held_after_forward(*prepared, ids, labels);
        EXPECT_EQ(mapped, with_key) << spec;
        EXPECT_GE(plain, mapped + scores) << spec << ": " << plain << " bytes held without, " << mapped << " under the plugin";
    }
}

TEST(MegatronRecompute, TrainsAsTheSelectiveSpec)
{
    for (const std::string &spec : {kGpt, kLlama}) {
        const auto prepared = build(spec, false);
        ASSERT_EQ(prepare_under_plugin(prepared), ACCEL_OK) << accel_last_error_message();
        const auto got = train(*prepared, 5), want = train(*build(spec, true), 5);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(at::equal(got[i], want[i])) << spec << " parameter " << i;
    }
}

TEST(MegatronRecompute, OtherModelsRefusedByName)
{
    const auto mlp = accel::make_model_from_json(R"({"type": "mlp", "widths": [4, 8, 2]})");
    EXPECT_EQ(prepare_under_plugin(mlp), ACCEL_ERR_UNIMPLEMENTED);
    const std::string msg = accel_last_error_message();
    EXPECT_NE(msg.find("megatron_lm_plugin.recompute_activation"), std::string::npos) << msg;
    EXPECT_NE(msg.find("gpt and llama models only"), std::string::npos) << msg;
}
