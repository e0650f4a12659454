// bf16 autocast vs fp32: step time of the medium MLP and of a small transformer block, both trained
// through the accel C API (dataloader_next + train_step, AdamW), interleaved in one process, one thread.
//
//   bench_precision_bf16 [rounds] [steps_per_round] [--fp8]
//
// --fp8 adds the emulated FP8 mode (a cost figure for the emulation, not for FP8 hardware).
#include <accel/accel.h>

#include "bench_common.hpp"

#include <ATen/Parallel.h>
#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using bench::check;
using bench::Clock;
using bench::median;

// One training setup (accelerator, model, optimizer, loader) through the C API.
struct Run {
    std::string name;
    accel_accelerator_t *acc = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    accel_dataloader_t *dl = nullptr;
    std::vector<double> ms;
    double last_loss = 0.0;

    Run(std::string n, const char *config, const std::string &spec, accel_tensor_t *x, accel_tensor_t *y,
        int64_t batch)
        : name(std::move(n))
    {
        check(accel_accelerator_create(config, &acc), "accelerator");
        check(accel_random_set_seed(1, false, false), "seed");
        check(accel_model_create_from_json(spec.c_str(), &model), "model");
        check(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 1e-4}", &opt), "optimizer");
        std::string dl_config = "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": true, \"seed\": 3}";
        check(accel_dataloader_create_from_tensors(x, y, dl_config.c_str(), &dl), "dataloader");
        check(accel_accelerator_prepare(acc, model, opt, dl, nullptr), "prepare");
    }
    ~Run()
    {
        accel_dataloader_free(dl);
        accel_optimizer_free(opt);
        accel_model_free(model);
        accel_accelerator_free(acc);
    }
    void steps(int k)
    {
        for (int i = 0; i < k; ++i) {
            accel_batch_t *b = nullptr;
            check(accel_dataloader_next(dl, &b), "next");
            if (b == nullptr) check(accel_dataloader_next(dl, &b), "next"); // a new pass
            check(accel_accelerator_train_step(acc, model, opt, nullptr, b, "cross_entropy", &last_loss), "step");
            accel_batch_free(b);
        }
    }
};

void measure(const char *title, const std::string &spec, const at::Tensor &X, const at::Tensor &Y, int64_t batch,
           int rounds, int steps, bool fp8)
{
    std::vector<int64_t> xs(X.sizes().begin(), X.sizes().end());
    const int64_t ys[1] = {Y.size(0)};
    accel_tensor_t *xt = nullptr, *yt = nullptr;
    check(accel_tensor_create(X.data_ptr(), X.nbytes(), ACCEL_DTYPE_FLOAT32, xs.data(), xs.size(), &xt), "x");
    check(accel_tensor_create(Y.data_ptr(), Y.nbytes(), ACCEL_DTYPE_INT64, ys, 1, &yt), "y");
    std::vector<Run *> runs{new Run("fp32", "{\"mixed_precision\": \"no\"}", spec, xt, yt, batch),
                            new Run("bf16", "{\"mixed_precision\": \"bf16\"}", spec, xt, yt, batch)};
    if (fp8) runs.push_back(new Run("fp8 (emulated)", "{\"mixed_precision\": \"fp8\"}", spec, xt, yt, batch));
    for (Run *r : runs) r->steps(3); // warm-up
    for (int round = 0; round < rounds; ++round) {
        // Rotate the order every round so that no mode always runs on a warmer cache.
        for (size_t k = 0; k < runs.size(); ++k) {
            Run *r = runs[(k + static_cast<size_t>(round)) % runs.size()];
            auto t0 = Clock::now();
            r->steps(steps);
            r->ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps);
        }
    }
    std::printf("%s\n  %s, batch %lld, AdamW, 1 thread, %d rounds x %d steps (median ms/step)\n", title, spec.c_str(),
                static_cast<long long>(batch), rounds, steps);
    const double base = median(runs[0]->ms);
    for (Run *r : runs)
        std::printf("  %-15s %9.3f ms/step   ratio to fp32 %6.3f   (last loss %.4f)\n", r->name.c_str(), median(r->ms),
                    median(r->ms) / base, r->last_loss);
    for (Run *r : runs) delete r;
    accel_tensor_free(xt);
    accel_tensor_free(yt);
}

} // namespace

int main(int argc, char **argv)
{
    int rounds = 11, steps = 10;
    bool fp8 = false;
    std::vector<int> numbers;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--fp8") == 0) fp8 = true;
        else numbers.push_back(std::atoi(argv[i]));
    }
    if (numbers.size() > 0 && numbers[0] > 0) rounds = numbers[0];
    if (numbers.size() > 1 && numbers[1] > 0) steps = numbers[1];
    at::set_num_threads(1);

    {
        const int64_t batch = 64, n = batch * 16;
        at::manual_seed(0);
        at::Tensor X = at::randn({n, 1024}), Y = at::randint(10, {n}, at::kLong);
        measure("Medium MLP", "{\"type\": \"mlp\", \"widths\": [1024, 1024, 1024, 10]}", X, Y, batch, rounds, steps, fp8);
    }
    {
        // One post-norm encoder layer (PyTorch's defaults: relu, dropout 0.1) on 64 tokens of width 256,
        // then a linear classifier over the flattened sequence.
        const int64_t batch = 16, seq = 64, d = 256, n = batch * 16;
        at::manual_seed(0);
        at::Tensor X = at::randn({n, seq, d}), Y = at::randint(10, {n}, at::kLong);
        const std::string spec =
            "{\"type\": \"sequential\", \"layers\": [{\"type\": \"transformer_encoder_layer\", \"d_model\": 256,"
            " \"nhead\": 8, \"dim_feedforward\": 1024, \"batch_first\": true}, {\"type\": \"flatten\"},"
            " {\"type\": \"linear\", \"in_features\": " + std::to_string(seq * d) + ", \"out_features\": 10}]}";
        measure("Transformer encoder block", spec, X, Y, batch, rounds, steps, fp8);
    }
    return 0;
}
