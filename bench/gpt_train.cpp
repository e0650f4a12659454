// GPT training throughput: the example's model ({"type": "gpt"}, 4 layers, n_embd 128, 4 heads,
// 128 positions, vocabulary 96, batch 16, AdamW) trained through the C API (token data loader +
// train_step with "causal_lm") and through a hand-written LibTorch loop of the same model (torch::nn
// modules, manual batching, at::autocast for bf16), in fp32 and bf16, alternating rounds in one process,
// one thread. Prints tokens/s of each and the ratio of step times (accel / LibTorch), by the wall clock and by
// the thread's CPU time. This file holds the model; the training loops and the rounds are lm_bench.hpp's.
// Then the peak memory of training with and without activation checkpointing: each variant runs a few
// steps in a child process of its own and reports its peak resident set (VmHWM) above the resident set
// it had before the first step.
//
//   bench_gpt_train [rounds] [steps_per_round] [batch] [--memory-only]
#include <accel/accel.h>

#include "lm_bench.hpp"

#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

constexpr int64_t kVocab = 96, kBlock = 128, kEmbd = 128, kLayers = 4, kHeads = 4;

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

std::string model_spec(bool checkpointing)
{
    return "{\"type\": \"gpt\", \"vocab_size\": " + std::to_string(kVocab) + ", \"n_positions\": " +
           std::to_string(kBlock) + ", \"n_embd\": " + std::to_string(kEmbd) + ", \"n_layer\": " +
           std::to_string(kLayers) + ", \"n_head\": " + std::to_string(kHeads) +
           ", \"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attn_pdrop\": 0.0, \"activation_checkpointing\": " +
           (checkpointing ? "true" : "false") + "}";
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
        bench::AccelLmRun r = bench::make_accel_lm(nullptr, model_spec(checkpointing), tokens, kBlock, batch);
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

    bench::LmTokens data = bench::make_lm_tokens<kVocab, kBlock>(batch);

    // First, while this process's heap is fresh: the children inherit it (see training_peak_kb).
    const long plain = training_peak_kb(data.tokens, batch, false, 3);
    const long ckpt = training_peak_kb(data.tokens, batch, true, 3);
    std::printf("  peak memory of 3 training steps from the start (VmHWM above the RSS before them, incl. AdamW state, fp32, batch %lld):\n"
                "    without activation checkpointing %7.1f MiB\n    with activation checkpointing    %7.1f MiB"
                "   (%.2f x)\n",
                static_cast<long long>(batch), plain / 1024.0, ckpt / 1024.0, plain > 0 ? double(ckpt) / plain : 0.0);
    if (!memory_only)
        bench::compare_with_libtorch<Gpt, kVocab, kBlock>("GPT", model_spec(false), data, batch, rounds, steps);
    accel_tensor_free(data.tokens);
    return 0;
}
