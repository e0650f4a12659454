// Train an MLP on a synthetic classification set through accel's C++ header (include/accel/accel.hpp).
//
//   ./train_mlp_cpp ['<accelerator config JSON>']
//
// The same program as examples/c/train_mlp.c: the same data generator and seed, so it prints the same
// losses. Exits non-zero if training accuracy stays below 95 %.
#include <accel/accel.hpp>

#include "../c/progress.h" // the C examples' progress bar

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace {

constexpr int kNumSamples = 2048, kNumFeatures = 16, kNumClasses = 4, kEpochs = 8;

// The C example's generator: a 64-bit LCG and Box-Muller, so the data set is the same everywhere.
class Lcg {
public:
    double uniform()
    {
        state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
        return (static_cast<double>(state_ >> 11) + 0.5) / 9007199254740992.0;
    }
    double gaussian()
    {
        const double u1 = uniform();
        const double u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }

private:
    std::uint64_t state_ = 0x9E3779B97F4A7C15ULL;
};

double accuracy(accel::Model &model, const accel::Tensor &features, const std::vector<std::int64_t> &labels)
{
    model.eval();
    const auto logits = model.forward_no_grad(features).to_vector<float>();
    model.train();
    int correct = 0;
    for (int i = 0; i < kNumSamples; ++i) {
        int best = 0;
        for (int c = 1; c < kNumClasses; ++c)
            if (logits[i * kNumClasses + c] > logits[i * kNumClasses + best])
                best = c;
        correct += best == labels[i];
    }
    return static_cast<double>(correct) / kNumSamples;
}

} // namespace

int main(int argc, char **argv)
{
    Lcg rng;
    std::vector<std::vector<double>> centers(kNumClasses, std::vector<double>(kNumFeatures));
    for (auto &center : centers)
        for (auto &v : center)
            v = 1.0 * rng.gaussian();
    std::vector<float> x(kNumSamples * kNumFeatures);
    std::vector<std::int64_t> y(kNumSamples);
    for (int i = 0; i < kNumSamples; ++i) {
        const int c = i % kNumClasses;
        y[i] = c;
        for (int f = 0; f < kNumFeatures; ++f)
            x[i * kNumFeatures + f] = static_cast<float>(centers[c][f] + rng.gaussian());
    }

    double acc_value = 0.0, final_loss = 0.0;
    try {
        accel::set_seed(42);
        accel::Accelerator acc = argc > 1 ? accel::Accelerator(std::string(argv[1])) : accel::Accelerator();
        auto features = accel::Tensor::from(x, {kNumSamples, kNumFeatures});
        auto labels = accel::Tensor::from(y, {kNumSamples});
        auto model = accel::Model::from_json(R"({"type": "mlp", "widths": [16, 64, 64, 4], "activation": "relu"})");
        accel::Optimizer opt(model, R"({"type": "adamw", "lr": 0.003})");
        accel::DataLoader dl(features, &labels, R"({"batch_size": 64, "shuffle": true, "seed": 42})");
        accel::Scheduler sched(opt, R"({"type": "cosine", "num_warmup_steps": 10, "num_training_steps": )" +
                                        std::to_string(kEpochs * dl.length() / acc.gradient_accumulation_steps()) + "}");
        acc.prepare(&model, &opt, &dl, &sched);
        // Every step's loss and learning rate go to the trackers of the config's "log_with" (none: nothing);
        // accel.hpp has no tracker methods yet, so the C API is called on the handle.
        auto ok = [](accel_status_t st) {
            if (st != ACCEL_OK) throw accel::Error(st, accel_last_error_message());
        };
        ok(accel_accelerator_init_trackers(acc.get(), "train_mlp",
                                           ("{\"lr\": 0.003, \"batch_size\": 64, \"epochs\": " + std::to_string(kEpochs) + "}").c_str(),
                                           nullptr));
        const bool bar = progress_enabled(acc.get());
        const std::int64_t batches = dl.length();
        std::int64_t global_step = 0;

        for (int epoch = 1; epoch <= kEpochs; ++epoch) {
            const auto start = std::chrono::steady_clock::now();
            const double wall = progress_now();
            double loss_sum = 0.0;
            std::int64_t steps = 0;
            while (auto batch = dl.next_batch()) {
                const double loss = acc.train_step(model, opt, &sched, batch, "cross_entropy");
                char values[96];
                std::snprintf(values, sizeof values, "{\"loss\": %.9g, \"lr\": %.9g}", loss, sched.last_lr());
                ok(accel_accelerator_log(acc.get(), values, global_step++));
                loss_sum += loss;
                ++steps;
                if (bar) {
                    char label[32];
                    std::snprintf(label, sizeof label, "epoch %d/%d", epoch, kEpochs);
                    progress_draw(label, steps, batches,
                                  static_cast<double>(steps * 64 * acc.num_processes()) / (progress_now() - wall),
                                  "samples", loss_sum / static_cast<double>(steps));
                }
            }
            if (bar) progress_clear();
            acc_value = accuracy(model, features, y);
            final_loss = loss_sum / static_cast<double>(steps);
            char line[160];
            std::snprintf(line, sizeof line, "epoch %d/%d  loss %.4f  train accuracy %5.1f%%  lr %.5f  (%.2f s)", epoch,
                          kEpochs, final_loss, 100.0 * acc_value, sched.last_lr(),
                          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
            acc.print(line);
        }
        char line[64];
        std::snprintf(line, sizeof line, "final loss %.8f", final_loss);
        acc.print(line);
        ok(accel_accelerator_end_training(acc.get()));
    } catch (const accel::Error &e) {
        std::fprintf(stderr, "train_mlp_cpp: %s: %s\n", e.status_name(), e.what());
        return 1;
    }
    if (acc_value < 0.95) {
        std::fprintf(stderr, "train_mlp_cpp: training accuracy %.1f%% is below 95%%\n", 100.0 * acc_value);
        return 1;
    }
    return 0;
}
