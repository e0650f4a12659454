// Llama training throughput (issue 34): a small {"type": "llama"} (4 layers, hidden 128, 4 heads with 2 key/value
// heads, SwiGLU 344, 128 positions, vocabulary 96, tied head, batch 16, AdamW) trained through the C API (token
// data loader + train_step with "causal_lm") and through a hand-written LibTorch loop of the same model (torch::nn
// Linear/Embedding modules, RMSNorm, rotary embeddings with cos/sin computed once, repeat_kv, manual batching,
// at::autocast for bf16), in fp32 and bf16, alternating rounds in one process, one thread. Prints tokens/s of each
// and the ratio of step times (accel / LibTorch), by the wall clock and by the thread's CPU time (which a loaded
// machine disturbs less: another process's time slices are not counted). The goal is a ratio <= 1.02.
//
//   bench_llama_train [rounds] [steps_per_round] [batch]
#include <accel/accel.h>

#include "bench_common.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

namespace {

constexpr int64_t kVocab = 96, kBlock = 128, kHidden = 128, kInner = 344, kLayers = 4, kHeads = 4, kKv = 2;
constexpr int64_t kHeadDim = kHidden / kHeads;
constexpr double kEps = 1e-6, kTheta = 10000.0;

using bench::check;
using bench::Clock;
using bench::median;

double thread_cpu_seconds()
{
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

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

struct AccelRun {
    accel_accelerator_t *acc = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    accel_dataloader_t *dl = nullptr;
    void steps(int k)
    {
        for (int i = 0; i < k; ++i) {
            accel_batch_t *b = nullptr;
            check(accel_dataloader_next(dl, &b), "next");
            if (b == nullptr) check(accel_dataloader_next(dl, &b), "next");
            double loss = 0;
            check(accel_accelerator_train_step(acc, model, opt, nullptr, b, "causal_lm", &loss), "step");
            accel_batch_free(b);
        }
    }
    void free_all()
    {
        accel_dataloader_free(dl);
        accel_optimizer_free(opt);
        accel_model_free(model);
        accel_accelerator_free(acc);
    }
};

std::string model_spec()
{
    return "{\"type\": \"llama\", \"vocab_size\": " + std::to_string(kVocab) + ", \"hidden_size\": " +
           std::to_string(kHidden) + ", \"intermediate_size\": " + std::to_string(kInner) +
           ", \"num_hidden_layers\": " + std::to_string(kLayers) + ", \"num_attention_heads\": " +
           std::to_string(kHeads) + ", \"num_key_value_heads\": " + std::to_string(kKv) +
           ", \"max_position_embeddings\": " + std::to_string(kBlock) + ", \"tie_word_embeddings\": true}";
}

AccelRun make_accel(const char *config, accel_tensor_t *tokens, int64_t batch)
{
    AccelRun r;
    check(accel_accelerator_create(config, &r.acc), "accelerator");
    check(accel_random_set_seed(1, false, false), "seed");
    check(accel_model_create_from_json(model_spec().c_str(), &r.model), "model");
    check(accel_optimizer_create(r.model, "{\"type\": \"adamw\", \"lr\": 3e-4}", &r.opt), "optimizer");
    std::string dl = "{\"block_size\": " + std::to_string(kBlock) + ", \"batch_size\": " + std::to_string(batch) +
                     ", \"shuffle\": true, \"seed\": 3, \"drop_last\": true}";
    check(accel_dataloader_create_from_tokens(tokens, dl.c_str(), &r.dl), "dataloader");
    check(accel_accelerator_prepare(r.acc, r.model, r.opt, r.dl, nullptr), "prepare");
    return r;
}

struct TorchRun {
    Llama net;
    std::unique_ptr<torch::optim::AdamW> adamw;
    at::Tensor windows, perm;
    int64_t cursor = 0, batch = 0;
    uint64_t epoch = 0;
    bool bf16 = false;
    void steps(int k)
    {
        const int64_t n = windows.size(0);
        for (int i = 0; i < k; ++i) {
            if (!perm.defined() || cursor + batch > n) {
                perm = torch::randperm(n, at::detail::createCPUGenerator(3 + epoch++), torch::kLong);
                cursor = 0;
            }
            at::Tensor w = windows.index_select(0, perm.narrow(0, cursor, batch));
            cursor += batch;
            at::Tensor x = w.narrow(1, 0, kBlock), y = w.narrow(1, 1, kBlock);
            adamw->zero_grad();
            at::Tensor logits;
            if (bf16) {
                at::autocast::set_cpu_enabled(true);
                at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
                logits = net->forward(x).to(at::kFloat);
                at::autocast::set_cpu_enabled(false);
                at::autocast::clear_cache();
            } else {
                logits = net->forward(x);
            }
            at::Tensor loss = torch::nn::functional::cross_entropy(logits.view({-1, kVocab}), y.reshape({-1}));
            loss.backward();
            adamw->step();
            (void)loss.item<double>();
        }
    }
};

TorchRun make_torch(const at::Tensor &stream, int64_t batch, bool bf16)
{
    TorchRun t;
    torch::manual_seed(1);
    t.net = Llama();
    t.adamw = std::make_unique<torch::optim::AdamW>(t.net->parameters(), torch::optim::AdamWOptions(3e-4));
    t.windows = stream.unfold(0, kBlock + 1, kBlock);
    t.batch = batch;
    t.bf16 = bf16;
    return t;
}

} // namespace

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 5;
    const int64_t batch = argc > 3 ? std::atol(argv[3]) : 16;
    at::set_num_threads(1);
    const int64_t n = batch * (kBlock + 1) * 16;
    torch::manual_seed(0);
    at::Tensor stream = torch::randint(kVocab, {n}, torch::kLong);
    accel_tensor_t *tokens = nullptr;
    check(accel_tensor_create(stream.data_ptr(), stream.nbytes(), ACCEL_DTYPE_INT64, &n, 1, &tokens), "tokens");
    const double tokens_per_step = double(batch * kBlock);
    std::printf("llama %s, batch %lld, AdamW, 1 thread, %d rounds x %d steps (median)\n", model_spec().c_str(),
                static_cast<long long>(batch), rounds, steps);
    for (bool bf16 : {false, true}) {
        AccelRun a = make_accel(bf16 ? "{\"mixed_precision\": \"bf16\"}" : nullptr, tokens, batch);
        TorchRun t = make_torch(stream, batch, bf16);
        a.steps(2);
        t.steps(2);
        std::vector<double> ta, tt, ca, ct;
        for (int r = 0; r < rounds; ++r)
            for (int which = 0; which < 2; ++which) {
                const bool accel_turn = (which == 0) == (r % 2 == 0);
                auto t0 = Clock::now();
                const double c0 = thread_cpu_seconds();
                accel_turn ? a.steps(steps) : t.steps(steps);
                const double cpu = (thread_cpu_seconds() - c0) / steps;
                const double s = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
                (accel_turn ? ta : tt).push_back(s);
                (accel_turn ? ca : ct).push_back(cpu);
            }
        const double sa = median(ta), st = median(tt);
        std::printf("  %s  accel C API: %8.0f tokens/s   LibTorch loop: %8.0f tokens/s   ratio (time) %.3f   "
                    "(CPU time %.3f)\n",
                    bf16 ? "bf16" : "fp32", tokens_per_step / sa, tokens_per_step / st, sa / st, median(ca) / median(ct));
        a.free_all();
    }
    accel_tensor_free(tokens);
    return 0;
}
