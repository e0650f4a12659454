// Llama training throughput (issue 34): a small {"type": "llama"} (4 layers, hidden 128, 4 heads with 2 key/value
// heads, SwiGLU 344, 128 positions, vocabulary 96, tied head, batch 16, AdamW) trained through the C API (token
// data loader + train_step with "causal_lm") and through a hand-written LibTorch loop of the same model (torch::nn
// Linear/Embedding modules, RMSNorm, rotary embeddings with cos/sin computed once, repeat_kv, manual batching,
// at::autocast for bf16), in fp32 and bf16, alternating rounds in one process, one thread. Prints tokens/s of each
// and the ratio of step times (accel / LibTorch), by the wall clock and by the thread's CPU time (which a loaded
// machine disturbs less: another process's time slices are not counted). The goal is a ratio <= 1.02. This file
// holds the model; the training loops and the rounds are lm_bench.hpp's, shared with gpt_train.cpp.
//
//   bench_llama_train [rounds] [steps_per_round] [batch]
#include <accel/accel.h>

#include "lm_bench.hpp"

#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

constexpr int64_t kVocab = 96, kBlock = 128, kHidden = 128, kInner = 344, kLayers = 4, kHeads = 4, kKv = 2;
constexpr int64_t kHeadDim = kHidden / kHeads;
constexpr double kEps = 1e-6, kTheta = 10000.0;

// ---- the hand-written LibTorch model -----------------------------------------------------------------------------
at::Tensor rms(const at::Tensor &x, const at::Tensor &w)
{
    at::Tensor x32 = x.to(at::kFloat);
    return w * (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + kEps)).to(x.scalar_type());
}

at::Tensor rope(const at::Tensor &x, const at::Tensor &cos, const at::Tensor &sin)
{
    auto h = x.chunk(2, -1);
    return x * cos + at::cat({-h[1], h[0]}, -1) * sin;
}

at::Tensor repeat_kv(const at::Tensor &x)
{
    const int64_t B = x.size(0), T = x.size(2);
    return x.unsqueeze(2).expand({B, kKv, kHeads / kKv, T, kHeadDim}).reshape({B, kHeads, T, kHeadDim});
}

struct LayerImpl : torch::nn::Module {
    torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr}, gate{nullptr}, up{nullptr}, down{nullptr};
    at::Tensor norm1, norm2;
    LayerImpl()
    {
        auto lin = [&](const char *name, int64_t in, int64_t out) {
            return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
        };
        q = lin("q", kHidden, kHeads * kHeadDim);
        k = lin("k", kHidden, kKv * kHeadDim);
        v = lin("v", kHidden, kKv * kHeadDim);
        o = lin("o", kHeads * kHeadDim, kHidden);
        gate = lin("gate", kHidden, kInner);
        up = lin("up", kHidden, kInner);
        down = lin("down", kInner, kHidden);
        norm1 = register_parameter("norm1", torch::ones({kHidden}));
        norm2 = register_parameter("norm2", torch::ones({kHidden}));
    }
    at::Tensor forward(const at::Tensor &h, const at::Tensor &cos, const at::Tensor &sin, const at::Tensor &mask)
    {
        const int64_t B = h.size(0), T = h.size(1);
        at::Tensor x = rms(h, norm1);
        at::Tensor qh = rope(q->forward(x).view({B, T, kHeads, kHeadDim}).transpose(1, 2), cos, sin);
        at::Tensor kh = rope(k->forward(x).view({B, T, kKv, kHeadDim}).transpose(1, 2), cos, sin);
        at::Tensor vh = v->forward(x).view({B, T, kKv, kHeadDim}).transpose(1, 2);
        at::Tensor s = torch::matmul(qh, repeat_kv(kh).transpose(2, 3)) * std::pow(double(kHeadDim), -0.5);
        at::Tensor a = torch::softmax(s.masked_fill(mask, -INFINITY), -1, at::kFloat).to(qh.scalar_type());
        at::Tensor y = torch::matmul(a, repeat_kv(vh)).transpose(1, 2).reshape({B, T, kHidden});
        at::Tensor r = h + o->forward(y);
        x = rms(r, norm2);
        return r + down->forward(torch::silu(gate->forward(x)) * up->forward(x));
    }
};
TORCH_MODULE(Layer);

struct LlamaImpl : torch::nn::Module {
    torch::nn::Embedding embed{nullptr};
    std::vector<Layer> layers;
    at::Tensor norm, cos, sin, mask;
    LlamaImpl()
    {
        embed = register_module("embed", torch::nn::Embedding(kVocab, kHidden));
        for (int64_t i = 0; i < kLayers; ++i) layers.push_back(register_module("l" + std::to_string(i), Layer()));
        norm = register_parameter("norm", torch::ones({kHidden}));
        at::Tensor inv = at::reciprocal(at::pow(kTheta, at::arange(0, kHeadDim, 2, at::kLong).to(at::kFloat) / double(kHeadDim)));
        at::Tensor f = at::outer(at::arange(kBlock, at::kLong).to(at::kFloat), inv);
        cos = at::cat({f, f}, -1).cos();
        sin = at::cat({f, f}, -1).sin();
        mask = torch::ones({kBlock, kBlock}, torch::kBool).triu(1);
    }
    at::Tensor forward(const at::Tensor &ids)
    {
        at::Tensor h = embed->forward(ids);
        for (auto &l : layers) h = l->forward(h, cos, sin, mask);
        return torch::nn::functional::linear(rms(h, norm), embed->weight); // tied head
    }
};
TORCH_MODULE(Llama);

std::string model_spec()
{
    return "{\"type\": \"llama\", \"vocab_size\": " + std::to_string(kVocab) + ", \"hidden_size\": " +
           std::to_string(kHidden) + ", \"intermediate_size\": " + std::to_string(kInner) +
           ", \"num_hidden_layers\": " + std::to_string(kLayers) + ", \"num_attention_heads\": " +
           std::to_string(kHeads) + ", \"num_key_value_heads\": " + std::to_string(kKv) +
           ", \"max_position_embeddings\": " + std::to_string(kBlock) + ", \"tie_word_embeddings\": true}";
}

} // namespace

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
    const int64_t batch = argc > 3 ? std::atol(argv[3]) : 16;
    at::set_num_threads(1);
    bench::LmTokens data = bench::make_lm_tokens<kVocab, kBlock>(batch);
    bench::compare_with_libtorch<Llama, kVocab, kBlock>("llama", model_spec(), data, batch, rounds, steps);
    accel_tensor_free(data.tokens);
    return 0;
}
