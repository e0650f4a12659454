// accel's per-step overhead: the same MLP trained through the C API (dataloader_next + train_step)
// and through a hand-written LibTorch loop, interleaved in one process, one thread, both on the device the
// accelerator picks (a GPU where LibTorch sees one, unless ACCELERATE_USE_CPU=1; batches are gathered on the
// host and copied over, as a prepared loader does).
//
//   bench_overhead [rounds] [steps_per_round] [widths, e.g. 1024,1024,1024,10] [batch]
#include <accel/accel.h>

#include "bench_common.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

namespace {

using bench::check;
using bench::Clock;
using bench::median;

} // namespace

int main(int argc, char **argv)
{
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
    const int steps = argc > 2 ? std::atoi(argv[2]) : 20;
    std::vector<int64_t> widths{1024, 1024, 1024, 10};
    if (argc > 3) {
        widths.clear();
        std::stringstream ss(argv[3]);
        for (std::string w; std::getline(ss, w, ',');) widths.push_back(std::stoll(w));
    }
    const int64_t batch = argc > 4 ? std::atoll(argv[4]) : 64;
    at::set_num_threads(1);

    const int64_t n = batch * 32;
    torch::manual_seed(0);
    at::Tensor X = torch::randn({n, widths.front()});
    at::Tensor Y = torch::randint(widths.back(), {n}, torch::kLong);

    // ---- accel: C API only -------------------------------------------------------------------
    std::string spec = "{\"type\": \"mlp\", \"widths\": [";
    for (size_t i = 0; i < widths.size(); ++i) spec += (i ? "," : "") + std::to_string(widths[i]);
    spec += "]}";
    accel_accelerator_t *acc = nullptr;
    accel_model_t *model = nullptr;
    accel_optimizer_t *opt = nullptr;
    accel_dataloader_t *dl = nullptr;
    accel_tensor_t *xt = nullptr, *yt = nullptr;
    const int64_t xs[2] = {n, widths.front()}, ys[1] = {n};
    check(accel_accelerator_create(nullptr, &acc), "accelerator");
    check(accel_tensor_create(X.data_ptr(), X.nbytes(), ACCEL_DTYPE_FLOAT32, xs, 2, &xt), "x");
    check(accel_tensor_create(Y.data_ptr(), Y.nbytes(), ACCEL_DTYPE_INT64, ys, 1, &yt), "y");
    check(accel_random_set_seed(1, false, false), "seed");
    check(accel_model_create_from_json(spec.c_str(), &model), "model");
    check(accel_optimizer_create(model, "{\"type\": \"adamw\", \"lr\": 1e-4}", &opt), "optimizer");
    std::string dl_config = "{\"batch_size\": " + std::to_string(batch) + ", \"shuffle\": true, \"seed\": 3}";
    check(accel_dataloader_create_from_tensors(xt, yt, dl_config.c_str(), &dl), "dataloader");
    check(accel_accelerator_prepare(acc, model, opt, dl, nullptr), "prepare");
    char *device_name = nullptr;
    check(accel_accelerator_get_device(acc, &device_name), "device");
    const at::Device device(device_name);
    accel_string_free(device_name);
    auto accel_steps = [&](int k) {
        for (int i = 0; i < k; ++i) {
            accel_batch_t *b = nullptr;
            check(accel_dataloader_next(dl, &b), "next");
            if (b == nullptr) check(accel_dataloader_next(dl, &b), "next");
            double loss = 0;
            check(accel_accelerator_train_step(acc, model, opt, nullptr, b, "cross_entropy", &loss), "step");
            accel_batch_free(b);
        }
    };

    // ---- baseline: what a LibTorch user writes by hand ----------------------------------------
    torch::manual_seed(1);
    torch::nn::Sequential net;
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
        net->push_back(torch::nn::Linear(widths[i], widths[i + 1]));
        if (i + 2 < widths.size()) net->push_back(torch::nn::ReLU());
    }
    net->to(device);
    torch::optim::AdamW adamw(net->parameters(), torch::optim::AdamWOptions(1e-4));
    at::Tensor perm;
    int64_t cursor = n;
    uint64_t epoch = 0;
    auto baseline_steps = [&](int k) {
        for (int i = 0; i < k; ++i) {
            if (cursor + batch > n) {
                perm = torch::randperm(n, at::detail::createCPUGenerator(3 + epoch++), torch::kLong);
                cursor = 0;
            }
            at::Tensor idx = perm.narrow(0, cursor, batch);
            cursor += batch;
            at::Tensor x = X.index_select(0, idx).to(device), y = Y.index_select(0, idx).to(device);
            adamw.zero_grad();
            at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
            loss.backward();
            adamw.step();
            (void)loss.item<double>();
        }
    };

    accel_steps(5);
    baseline_steps(5);
    std::vector<double> t_accel, t_base;
    for (int r = 0; r < rounds; ++r) {
        // Alternate which loop goes first so neither always runs on a warmer cache.
        for (int which = 0; which < 2; ++which) {
            bool accel_turn = (which == 0) == (r % 2 == 0);
            auto t0 = Clock::now();
            accel_turn ? accel_steps(steps) : baseline_steps(steps);
            double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / steps;
            (accel_turn ? t_accel : t_base).push_back(ms);
        }
    }
    double a = median(t_accel), b = median(t_base);
    std::printf("MLP %s batch %lld, AdamW, 1 thread, on %s, %d rounds x %d steps (median ms/step)\n", spec.c_str(),
                static_cast<long long>(batch), device.str().c_str(), rounds, steps);
    std::printf("  accel C API (dataloader_next + train_step): %8.3f ms/step\n", a);
    std::printf("  hand-written LibTorch loop:                 %8.3f ms/step\n", b);
    std::printf("  ratio accel / LibTorch:                     %8.3f\n", a / b);

    accel_dataloader_free(dl);
    accel_optimizer_free(opt);
    accel_model_free(model);
    accel_tensor_free(xt);
    accel_tensor_free(yt);
    accel_accelerator_free(acc);
    return 0;
}
