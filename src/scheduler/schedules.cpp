#include "scheduler/schedules.hpp"

#include <algorithm>
#include <cmath>

namespace accel {

namespace {
constexpr double kPi = 3.14159265358979323846;

double warmup(int64_t step, int64_t warmup_steps)
{
    return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
}
} // namespace

double lr_multiplier(const config::SchedulerConfig &c, int64_t step, double base_lr)
{
    const int64_t W = c.num_warmup_steps, T = c.num_training_steps;
    if (c.type == "constant") return step < W ? warmup(step, W) : 1.0;
    if (c.type == "linear") {
        if (step < W) return warmup(step, W);
        return std::max(0.0, static_cast<double>(T - step) / static_cast<double>(std::max<int64_t>(1, T - W)));
    }
    if (c.type == "cosine") {
        if (step < W) return warmup(step, W);
        double progress = static_cast<double>(step - W) / static_cast<double>(std::max<int64_t>(1, T - W));
        return std::max(0.0, 0.5 * (1.0 + std::cos(kPi * c.num_cycles * 2.0 * progress)));
    }
    if (c.type == "polynomial") {
        if (step < W) return warmup(step, W);
        if (step > T || T == W) return c.lr_end / base_lr;
        double range = base_lr - c.lr_end;
        double remaining = 1.0 - static_cast<double>(step - W) / static_cast<double>(T - W);
        return (range * std::pow(remaining, c.power) + c.lr_end) / base_lr;
    }
    if (c.type == "step") return std::pow(c.gamma, static_cast<double>(step / c.step_size));
    // exponential
    return std::pow(c.gamma, static_cast<double>(step));
}

namespace {
// DeepSpeed's warmup fraction at iteration `step` < W (W at least 2, as DeepSpeed clamps it).
double deepspeed_warmup(const config::SchedulerConfig &c, int64_t step, int64_t W)
{
    return c.log_warmup ? std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(W))
                        : static_cast<double>(step) / static_cast<double>(W);
}
} // namespace

double scheduled_lr(const config::SchedulerConfig &c, int64_t step, double base_lr)
{
    if (c.type == "dummy") return base_lr;
    if (!c.deepspeed()) return base_lr * lr_multiplier(c, step, base_lr);
    const int64_t W = std::max<int64_t>(2, c.num_warmup_steps), T = c.num_training_steps;
    if (c.type == "WarmupCosineLR") {
        if (step < 0) return 0.0;
        if (step < W) return base_lr * (c.warmup_min_ratio + deepspeed_warmup(c, step, W) * (1.0 - c.warmup_min_ratio));
        const double progress = std::min(1.0, static_cast<double>(step - W + 1) / static_cast<double>(std::max<int64_t>(1, T - W)));
        return base_lr * std::max(0.0, c.cos_min_ratio + (1.0 - c.cos_min_ratio) * (1.0 + std::cos(kPi * progress)) / 2.0);
    }
    if (step < 0) return c.warmup_min_lr;
    double gamma = 1.0;
    if (step < W) gamma = deepspeed_warmup(c, step, W);
    else if (c.type == "WarmupDecayLR")
        gamma = std::max(0.0, static_cast<double>(T - step) / std::max(1.0, static_cast<double>(T - W)));
    return c.warmup_min_lr + (c.warmup_max_lr - c.warmup_min_lr) * gamma;
}

} // namespace accel
