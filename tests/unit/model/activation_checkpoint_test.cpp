// model/activation_checkpoint on JSON-spec models: recomputing layers in backward gives the gradients of
// keeping their activations bit for bit (dropout and bf16 autocast included), leaves the random generator
// where the forward left it, never recomputes batch_norm (whose running statistics would update twice), and
// keeps fewer tensors alive for backward.
#include "common/error.hpp"
#include "model/model.hpp"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <gtest/gtest.h>

#include <malloc.h>

#include <map>
#include <string>
#include <vector>

namespace {

// A batch-first transformer layer (dropout inside), dropout, linear, relu, flatten, linear, batch_norm,
// linear: 8 layers (the transformer layer first: LibTorch 1.13's takes no bfloat16 input under autocast).
const char *kSpec = R"({"type": "sequential", "layers": [
    {"type": "transformer_encoder_layer", "d_model": 16, "nhead": 4, "dim_feedforward": 32, "dropout": 0.2,
     "batch_first": true},
    {"type": "dropout", "p": 0.3}, {"type": "linear", "in_features": 16, "out_features": 16}, {"type": "relu"},
    {"type": "flatten"}, {"type": "linear", "in_features": 80, "out_features": 12},
    {"type": "batch_norm", "num_features": 12}, {"type": "linear", "in_features": 12, "out_features": 3}]})";
constexpr size_t kLayers = 8, kBatchNorm = 6, kRelu = 3, kTransformer = 0;

struct Result {
    std::map<std::string, at::Tensor> tensors; // gradients, buffers, the generator's next numbers
};

Result run(bool checkpointing, bool bf16)
{
    at::manual_seed(5);
    auto m = accel::make_model_from_json(kSpec);
    if (checkpointing) m->set_activation_checkpointing(std::vector<bool>(m->layer_types().size(), true));
    EXPECT_EQ(m->activation_checkpointing(), checkpointing);
    at::Tensor x = at::randn({4, 5, 16});
    at::manual_seed(6);
    at::autocast::set_cpu_enabled(bf16);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::Tensor out = m->forward(x).to(at::kFloat);
    at::autocast::set_cpu_enabled(false);
    at::autocast::clear_cache();
    out.pow(2).mean().backward();
    Result r;
    for (const auto &[n, p] : m->named_parameters()) r.tensors[n] = p.grad().clone();
    for (const auto &[n, b] : m->named_buffers()) r.tensors["buffer " + n] = b.clone();
    r.tensors["rng after"] = at::rand({4}); // backward must leave the generator where forward left it
    return r;
}

TEST(ActivationCheckpoint, SpecModelGivesIdenticalGradients)
{
    for (bool bf16 : {false, true}) {
        Result plain = run(false, bf16), recomputed = run(true, bf16);
        ASSERT_EQ(plain.tensors.size(), recomputed.tensors.size());
        for (const auto &[n, t] : plain.tensors) {
            ASSERT_TRUE(t.defined()) << n;
            EXPECT_TRUE(at::equal(t, recomputed.tensors[n])) << n << (bf16 ? " (bf16)" : "");
        }
        // batch_norm ran once per forward: one batch counted.
        EXPECT_EQ(recomputed.tensors["buffer 6.num_batches_tracked"].item<int64_t>(), 1);
        EXPECT_GT(plain.tensors["0.self_attn.in_proj_weight"].abs().sum().item<double>(), 0.0);
    }
}

// Memory the forward leaves allocated for backward (glibc's count of bytes in use, after minus before;
// the output is the same size either way): recomputation keeps only each checkpointed layer's input.
int64_t bytes_kept_by_forward(bool checkpointing)
{
    at::manual_seed(5);
    auto m = accel::make_model_from_json(
        R"({"type": "sequential", "layers": [
            {"type": "transformer_encoder_layer", "d_model": 64, "nhead": 4, "dim_feedforward": 256, "dropout": 0.0,
             "batch_first": true},
            {"type": "transformer_encoder_layer", "d_model": 64, "nhead": 4, "dim_feedforward": 256, "dropout": 0.0,
             "batch_first": true}]})");
    if (checkpointing) m->set_activation_checkpointing({true, true});
    at::Tensor x = at::randn({8, 32, 64});
    auto in_use = [] {
        const struct mallinfo2 mi = mallinfo2();
        return static_cast<int64_t>(mi.uordblks + mi.hblkhd);
    };
    const int64_t before = in_use();
    at::Tensor out = m->forward(x);
    const int64_t kept = in_use() - before;
    out.sum().backward(); // and it still differentiates
    EXPECT_TRUE(m->named_parameters().front().second.grad().defined());
    return kept;
}

TEST(ActivationCheckpoint, KeepsLessForBackward)
{
    if (mallinfo2().uordblks == 0) // a sanitizer's allocator: glibc's malloc statistics stay empty
        GTEST_SKIP() << "malloc statistics unavailable (AddressSanitizer replaces malloc); measured in the main build";
    const int64_t plain = bytes_kept_by_forward(false), recomputed = bytes_kept_by_forward(true);
    // One activation here is 8 x 32 x 64 floats = 64 KiB; a transformer layer keeps about 20 of them.
    EXPECT_GT(plain, 16 * 65536) << plain;
    EXPECT_LT(recomputed * 4, plain) << recomputed << " vs " << plain;
}

TEST(ActivationCheckpoint, OnlyBatchNormAndParameterlessLayersAreSkipped)
{
    auto m = accel::make_model_from_json(kSpec);
    m->set_activation_checkpointing(std::vector<bool>(kLayers, false));
    EXPECT_FALSE(m->activation_checkpointing());
    std::vector<bool> only_bn(kLayers, false);
    only_bn[kBatchNorm] = true;
    m->set_activation_checkpointing(only_bn);
    EXPECT_FALSE(m->activation_checkpointing());
    std::vector<bool> only_relu(kLayers, false);
    only_relu[kRelu] = true; // no parameters: nothing to gain
    m->set_activation_checkpointing(only_relu);
    EXPECT_FALSE(m->activation_checkpointing());
    std::vector<bool> transformer(kLayers, false);
    transformer[kTransformer] = true;
    m->set_activation_checkpointing(transformer);
    EXPECT_TRUE(m->activation_checkpointing());
}

} // namespace
