// Shared by the language-model training benchmarks (gpt_train.cpp, llama_train.cpp): each brings its own
// hand-written LibTorch model; this file holds what the comparison around it needs, written once so that both
// benchmarks drive accel and their LibTorch baseline the same way (same token stream, same batching order,
// same optimizer, same alternating rounds):
//   - AccelLmRun: the C API side (token data loader + train_step with "causal_lm", AdamW lr 3e-4);
//   - TorchLmRun: the hand-written loop (windows of the stream batched by a seeded randperm per epoch, like
//     the shuffled token loader; at::autocast for bf16; cross-entropy; torch::optim::AdamW);
//   - compare_with_libtorch: fp32 then bf16, alternating rounds in one process, printing tokens/s and the
//     ratio of step times by the wall clock and by the thread's CPU time.
#pragma once

#include "bench_common.hpp"

#include <accel/accel.h>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace bench {

// The thread's CPU time: a loaded machine disturbs it less than the wall clock (another process's time
// slices are not counted), which is what makes a ratio measured beside other jobs still mean something.
inline double thread_cpu_seconds()
{
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct AccelLmRun {
    accel_accelerator_t *acc = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    accel_dataloader_t *dl = nullptr;
    void steps(int k)
    {
        for (int i = 0; i < k; ++i) {
            accel_batch_t *b = nullptr;
            check(accel_dataloader_next(dl, &b), "next");
            if (b == nullptr) check(accel_dataloader_next(dl, &b), "next"); // end of epoch: the next one starts
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

// `config` is the accelerator's JSON (nullptr: defaults), `model_spec` the model's.
inline AccelLmRun make_accel_lm(const char *config, const std::string &model_spec, accel_tensor_t *tokens,
                                int64_t block, int64_t batch)
{
    AccelLmRun r;
    check(accel_accelerator_create(config, &r.acc), "accelerator");
    check(accel_random_set_seed(1, false, false), "seed");
    check(accel_model_create_from_json(model_spec.c_str(), &r.model), "model");
    check(accel_optimizer_create(r.model, "{\"type\": \"adamw\", \"lr\": 3e-4}", &r.opt), "optimizer");
    std::string dl = "{\"block_size\": " + std::to_string(block) + ", \"batch_size\": " + std::to_string(batch) +
                     ", \"shuffle\": true, \"seed\": 3, \"drop_last\": true}";
    check(accel_dataloader_create_from_tokens(tokens, dl.c_str(), &r.dl), "dataloader");
    check(accel_accelerator_prepare(r.acc, r.model, r.opt, r.dl, nullptr), "prepare");
    return r;
}

// `Net` is a TORCH_MODULE holder whose forward maps [B, Block] token ids to [B, Block, Vocab] logits.
template <class Net, int64_t Vocab, int64_t Block>
struct TorchLmRun {
    Net net{nullptr};
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
            at::Tensor x = w.narrow(1, 0, Block), y = w.narrow(1, 1, Block);
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
            at::Tensor loss = torch::nn::functional::cross_entropy(logits.view({-1, Vocab}), y.reshape({-1}));
            loss.backward();
            adamw->step();
            (void)loss.item<double>(); // waits for the step, as accel's train_step returning the loss does
        }
    }
};

template <class Net, int64_t Vocab, int64_t Block>
TorchLmRun<Net, Vocab, Block> make_torch_lm(const at::Tensor &stream, int64_t batch, bool bf16)
{
    TorchLmRun<Net, Vocab, Block> t;
    torch::manual_seed(1);
    t.net = Net();
    t.adamw = std::make_unique<torch::optim::AdamW>(t.net->parameters(), torch::optim::AdamWOptions(3e-4));
    t.windows = stream.unfold(0, Block + 1, Block); // Block inputs + the next token as the last label
    t.batch = batch;
    t.bf16 = bf16;
    return t;
}

// The token stream both sides train on (16 batches of windows, seeded), as a tensor and as an accel tensor.
struct LmTokens {
    at::Tensor stream;
    accel_tensor_t *tokens = nullptr;
};

template <int64_t Vocab, int64_t Block>
LmTokens make_lm_tokens(int64_t batch)
{
    LmTokens t;
    const int64_t n = batch * (Block + 1) * 16;
    torch::manual_seed(0);
    t.stream = torch::randint(Vocab, {n}, torch::kLong);
    check(accel_tensor_create(t.stream.data_ptr(), t.stream.nbytes(), ACCEL_DTYPE_INT64, &n, 1, &t.tokens), "tokens");
    return t;
}

// fp32 then bf16: `rounds` rounds of `steps` steps each, accel and the LibTorch loop taking turns (which one goes
// first alternates, so neither always runs on a warmer cache), after 2 warm-up steps each; prints the medians.
template <class Net, int64_t Vocab, int64_t Block>
void compare_with_libtorch(const char *name, const std::string &model_spec, const LmTokens &data, int64_t batch,
                           int rounds, int steps)
{
    std::printf("%s %s, batch %lld, AdamW, 1 thread, %d rounds x %d steps (median)\n", name, model_spec.c_str(),
                static_cast<long long>(batch), rounds, steps);
    const double tokens_per_step = double(batch * Block);
    for (bool bf16 : {false, true}) {
        AccelLmRun a = make_accel_lm(bf16 ? "{\"mixed_precision\": \"bf16\"}" : nullptr, model_spec, data.tokens,
                                     Block, batch);
        auto t = make_torch_lm<Net, Vocab, Block>(data.stream, batch, bf16);
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
                    bf16 ? "bf16" : "fp32", tokens_per_step / sa, tokens_per_step / st, sa / st,
                    median(ca) / median(ct));
        a.free_all();
    }
}

} // namespace bench
