// GPT training throughput: the example's model ({"type": "gpt"}, 4 layers, n_embd 128, 4 heads,
// 128 positions, vocabulary 96, batch 16, AdamW) trained through the C API (token data loader +
// train_step with "causal_lm") and through a hand-written LibTorch loop of the same model (torch::nn
// modules, manual batching, at::autocast for bf16), in fp32 and bf16, alternating rounds in one process,
// one thread. Prints tokens/s of each and the ratio of step times (accel / LibTorch).
// Then the peak memory of training with and without activation checkpointing: each variant runs a few
// steps in a child process of its own and reports its peak resident set (VmHWM) above the resident set
// it had before the first step.
//
//   bench_gpt_train [rounds] [steps_per_round] [batch] [--memory-only]
#include <accel/accel.h>

#include "bench_common.hpp"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr int64_t kVocab = 96, kBlock = 128, kEmbd = 128, kLayers = 4, kHeads = 4;

using bench::check;
using bench::Clock;
using bench::median;

// ---- the hand-written LibTorch model: GPT-2 with torch::nn modules ------------------------------
struct BlockImpl : torch::nn::Module {
    torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
    torch::nn::Linear c_attn{nullptr}, attn_proj{nullptr}, c_fc{nullptr}, mlp_proj{nullptr};
    BlockImpl()
    {
        ln_1 = register_module("ln_1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
        c_attn = register_module("c_attn", torch::nn::Linear(kEmbd, 3 * kEmbd));
        attn_proj = register_module("attn_proj", torch::nn::Linear(kEmbd, kEmbd));
        ln_2 = register_module("ln_2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
        c_fc = register_module("c_fc", torch::nn::Linear(kEmbd, 4 * kEmbd));
        mlp_proj = register_module("mlp_proj", torch::nn::Linear(4 * kEmbd, kEmbd));
    }
    at::Tensor forward(const at::Tensor &x, const at::Tensor &mask)
    {
        const int64_t B = x.size(0), T = x.size(1), D = kEmbd / kHeads;
        auto qkv = c_attn->forward(ln_1->forward(x)).split(kEmbd, -1);
        auto heads = [&](const at::Tensor &t) { return t.view({B, T, kHeads, D}).transpose(1, 2); };
        at::Tensor att = torch::matmul(heads(qkv[0]), heads(qkv[1]).transpose(-1, -2)) / std::sqrt(double(D));
        att = torch::softmax(att.masked_fill(mask, -INFINITY), -1).to(qkv[2].scalar_type());
        at::Tensor y = torch::matmul(att, heads(qkv[2])).transpose(1, 2).reshape({B, T, kEmbd});
        at::Tensor a = x + attn_proj->forward(y);
        namespace F = torch::nn::functional;
        return a + mlp_proj->forward(F::gelu(c_fc->forward(ln_2->forward(a)), F::GELUFuncOptions().approximate("tanh")));
    }
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
    torch::nn::Embedding wte{nullptr}, wpe{nullptr};
    std::vector<Block> blocks;
    torch::nn::LayerNorm ln_f{nullptr};
    GptImpl()
    {
        wte = register_module("wte", torch::nn::Embedding(kVocab, kEmbd));
        wpe = register_module("wpe", torch::nn::Embedding(kBlock, kEmbd));
        for (int64_t i = 0; i < kLayers; ++i) blocks.push_back(register_module("h" + std::to_string(i), Block()));
        ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kEmbd})));
    }
    at::Tensor forward(const at::Tensor &ids)
    {
        const int64_t T = ids.size(1);
        at::Tensor mask = torch::ones({T, T}, torch::kBool).triu(1);
        at::Tensor h = wte->forward(ids) + wpe->forward(torch::arange(T, torch::kLong));
        for (auto &b : blocks) h = b->forward(h, mask);
        return torch::nn::functional::linear(ln_f->forward(h), wte->weight); // tied head
    }
};
TORCH_MODULE(Gpt);

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

std::string model_spec(bool checkpointing)
{
    return "{\"type\": \"gpt\", \"vocab_size\": " + std::to_string(kVocab) + ", \"n_positions\": " +
           std::to_string(kBlock) + ", \"n_embd\": " + std::to_string(kEmbd) + ", \"n_layer\": " +
           std::to_string(kLayers) + ", \"n_head\": " + std::to_string(kHeads) +
           ", \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0, \"activation_checkpointing\": " +
           (checkpointing ? "true" : "false") + "}";
}

AccelRun make_accel(const char *config, accel_tensor_t *tokens, int64_t batch, bool checkpointing)
{
    AccelRun r;
    check(accel_accelerator_create(config, &r.acc), "accelerator");
    check(accel_random_set_seed(1, false, false), "seed");
    check(accel_model_create_from_json(model_spec(checkpointing).c_str(), &r.model), "model");
    check(accel_optimizer_create(r.model, "{\"type\": \"adamw\", \"lr\": 3e-4}", &r.opt), "optimizer");
    std::string dl = "{\"block_size\": " + std::to_string(kBlock) + ", \"batch_size\": " + std::to_string(batch) +
                     ", \"shuffle\": true, \"seed\": 3, \"drop_last\": true}";
    check(accel_dataloader_create_from_tokens(tokens, dl.c_str(), &r.dl), "dataloader");
    check(accel_accelerator_prepare(r.acc, r.model, r.opt, r.dl, nullptr), "prepare");
    return r;
}

struct TorchRun {
    Gpt net;
    std::unique_ptr<torch::optim::AdamW> adamw;
    at::Tensor windows, perm;
    int64_t cursor = 0, batch = 0;
    uint64_t epoch = 0;
    bool bf16 = false;
    void steps(int k)
    {
        const int64_t n = windows.size(0);
        for (int i = 0; i < k; ++i) {
            if (perm.defined() == false || cursor + batch > n) {
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
    t.net = Gpt();
    t.adamw = std::make_unique<torch::optim::AdamW>(t.net->parameters(), torch::optim::AdamWOptions(3e-4));
    t.windows = stream.unfold(0, kBlock + 1, kBlock);
    t.batch = batch;
    t.bf16 = bf16;
    return t;
}

long rss_kb(const char *field)
{
    std::ifstream f("/proc/self/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind(field, 0) == 0) return std::atol(line.c_str() + std::strlen(field));
    return -1;
}

// Peak resident memory of the first `steps` training steps above the resident memory before them, in a child.
long training_peak_kb(accel_tensor_t *tokens, int64_t batch, bool checkpointing, int steps)
{
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        AccelRun r = make_accel(nullptr, tokens, batch, checkpointing);
        // Measured from before the first step: accel keeps freed memory in the process (its malloc
        // tuning), so after one step the activations' pages are already resident and a later step's peak
        // shows nothing. The first step also allocates AdamW's state (2 x the parameters, the same in
        // both variants). VmHWM restarts from the current RSS (writing 5 to clear_refs resets the peak).
        std::ofstream("/proc/self/clear_refs") << "5";
        long before = rss_kb("VmRSS:");
        r.steps(steps);
        long peak = rss_kb("VmHWM:") - before;
        if (write(fds[1], &peak, sizeof peak) != sizeof peak) _exit(1);
        _exit(0);
    }
    close(fds[1]);
    long peak = -1;
    if (read(fds[0], &peak, sizeof peak) != sizeof peak) peak = -1;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return peak;
}

} // namespace

int main(int argc, char **argv)
{
    bool memory_only = false;
    std::vector<long> numbers; // rounds, steps per round, batch
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--memory-only") == 0) memory_only = true;
        else numbers.push_back(std::atol(argv[i]));
    }
    const int rounds = numbers.size() > 0 ? int(numbers[0]) : 5;
    const int steps = numbers.size() > 1 ? int(numbers[1]) : 5;
    const int64_t batch = numbers.size() > 2 ? numbers[2] : 16;
    at::set_num_threads(1);

    const int64_t n = batch * (kBlock + 1) * 16;
    torch::manual_seed(0);
    at::Tensor stream = torch::randint(kVocab, {n}, torch::kLong);
    accel_tensor_t *tokens = nullptr;
    check(accel_tensor_create(stream.data_ptr(), stream.nbytes(), ACCEL_DTYPE_INT64, &n, 1, &tokens), "tokens");
    const double tokens_per_step = double(batch * kBlock);

    // First, while this process's heap is fresh: the children inherit it (see training_peak_kb).
    const long plain = training_peak_kb(tokens, batch, false, 3);
    const long ckpt = training_peak_kb(tokens, batch, true, 3);
    std::printf("  peak memory of 3 training steps from the start (VmHWM above the RSS before them, incl. AdamW state, fp32, batch %lld):\n"
                "    without activation checkpointing %7.1f MiB\n    with activation checkpointing    %7.1f MiB"
                "   (%.2f x)\n",
                static_cast<long long>(batch), plain / 1024.0, ckpt / 1024.0, plain > 0 ? double(ckpt) / plain : 0.0);
    if (!memory_only) {
        std::printf("GPT %s, batch %lld, AdamW, 1 thread, %d rounds x %d steps (median)\n", model_spec(false).c_str(),
                    static_cast<long long>(batch), rounds, steps);
        for (bool bf16 : {false, true}) {
            AccelRun a = make_accel(bf16 ? "{\"mixed_precision\": \"bf16\"}" : nullptr, tokens, batch, false);
            TorchRun t = make_torch(stream, batch, bf16);
            a.steps(2);
            t.steps(2);
            std::vector<double> ta, tt;
            for (int r = 0; r < rounds; ++r)
                for (int which = 0; which < 2; ++which) {
                    bool accel_turn = (which == 0) == (r % 2 == 0);
                    auto t0 = Clock::now();
                    accel_turn ? a.steps(steps) : t.steps(steps);
                    double s = std::chrono::duration<double>(Clock::now() - t0).count() / steps;
                    (accel_turn ? ta : tt).push_back(s);
                }
            double sa = median(ta), st = median(tt);
            std::printf("  %s  accel C API: %8.0f tokens/s   LibTorch loop: %8.0f tokens/s   ratio (time) %.3f\n",
                        bf16 ? "bf16" : "fp32", tokens_per_step / sa, tokens_per_step / st, sa / st);
            a.free_all();
        }
    }
    accel_tensor_free(tokens);
    return 0;
}
