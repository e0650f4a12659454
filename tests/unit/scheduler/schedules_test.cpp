// scheduler/schedules: lr_multiplier against hand-computed values of transformers'
// get_*_schedule_with_warmup lambdas and torch's StepLR / ExponentialLR closed forms.
#include "scheduler/schedules.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

using accel::lr_multiplier;
using accel::config::SchedulerConfig;

namespace {

SchedulerConfig sched(const std::string &type, int64_t warmup = 0, int64_t total = 0)
{
    SchedulerConfig c;
    c.type = type;
    c.num_warmup_steps = warmup;
    c.num_training_steps = total;
    return c;
}

double m(const SchedulerConfig &c, int64_t step, double base_lr = 1.0) { return lr_multiplier(c, step, base_lr); }

} // namespace

TEST(Schedules, ConstantWithoutWarmup)
{
    auto c = sched("constant");
    for (int64_t s : {0, 1, 5, 1000}) EXPECT_EQ(m(c, s), 1.0) << s;
}

TEST(Schedules, ConstantWithWarmup)
{
    auto c = sched("constant", 4);
    EXPECT_EQ(m(c, 0), 0.0);
    EXPECT_EQ(m(c, 1), 0.25);
    EXPECT_EQ(m(c, 2), 0.5);
    EXPECT_EQ(m(c, 3), 0.75);
    EXPECT_EQ(m(c, 4), 1.0); // warmup boundary: the full lr
    EXPECT_EQ(m(c, 5), 1.0);
    EXPECT_EQ(m(c, 100), 1.0);
}

TEST(Schedules, Linear)
{
    // W = 2, T = 10: step / 2 while warming up, then (10 - step) / 8, never below 0.
    auto c = sched("linear", 2, 10);
    EXPECT_EQ(m(c, 0), 0.0);
    EXPECT_EQ(m(c, 1), 0.5);
    EXPECT_EQ(m(c, 2), 1.0);
    EXPECT_EQ(m(c, 3), 0.875);
    EXPECT_EQ(m(c, 6), 0.5);
    EXPECT_EQ(m(c, 9), 0.125);
    EXPECT_EQ(m(c, 10), 0.0);
    EXPECT_EQ(m(c, 11), 0.0); // step > num_training_steps
    EXPECT_EQ(m(c, 50), 0.0);
}

TEST(Schedules, LinearWithoutWarmup)
{
    auto c = sched("linear", 0, 4);
    EXPECT_EQ(m(c, 0), 1.0);
    EXPECT_EQ(m(c, 1), 0.75);
    EXPECT_EQ(m(c, 4), 0.0);
}

TEST(Schedules, CosineHalfCycle)
{
    // W = 2, T = 10, num_cycles 0.5: 0.5 * (1 + cos(pi * progress)), progress = (step - 2) / 8.
    auto c = sched("cosine", 2, 10);
    EXPECT_EQ(m(c, 0), 0.0);
    EXPECT_EQ(m(c, 1), 0.5);
    EXPECT_DOUBLE_EQ(m(c, 2), 1.0);
    EXPECT_NEAR(m(c, 4), 0.85355339059327373, 1e-15); // 0.5 * (1 + cos(pi / 4))
    EXPECT_NEAR(m(c, 6), 0.5, 1e-15);
    EXPECT_NEAR(m(c, 8), 0.14644660940672624, 1e-15); // 0.5 * (1 + cos(3 pi / 4))
    EXPECT_NEAR(m(c, 10), 0.0, 1e-15);
    // transformers does not clamp the progress: past the end the cosine rises again.
    EXPECT_NEAR(m(c, 14), 0.5, 1e-15); // progress 1.5 -> 0.5 * (1 + cos(1.5 pi))
    EXPECT_NEAR(m(c, 18), 1.0, 1e-15);
}

TEST(Schedules, CosineWithCycles)
{
    auto c = sched("cosine", 0, 8);
    c.num_cycles = 1.0; // one full cosine period over the run
    EXPECT_DOUBLE_EQ(m(c, 0), 1.0);
    EXPECT_NEAR(m(c, 2), 0.5, 1e-15);
    EXPECT_NEAR(m(c, 4), 0.0, 1e-15);
    EXPECT_NEAR(m(c, 6), 0.5, 1e-15);
    EXPECT_NEAR(m(c, 8), 1.0, 1e-15);
}

TEST(Schedules, PolynomialPowerTwo)
{
    // base lr 1, lr_end 0.1, power 2, W = 2, T = 12:
    // lr = (0.9 * (1 - (step - 2) / 10)^2 + 0.1) / 1.
    auto c = sched("polynomial", 2, 12);
    c.lr_end = 0.1;
    c.power = 2.0;
    EXPECT_EQ(m(c, 0), 0.0);
    EXPECT_EQ(m(c, 1), 0.5);
    EXPECT_DOUBLE_EQ(m(c, 2), 1.0);
    EXPECT_DOUBLE_EQ(m(c, 4), 0.9 * 0.64 + 0.1);  // 0.676
    EXPECT_DOUBLE_EQ(m(c, 7), 0.9 * 0.25 + 0.1);  // 0.325
    EXPECT_DOUBLE_EQ(m(c, 12), 0.1);              // lr_end at the last step
    EXPECT_DOUBLE_EQ(m(c, 13), 0.1);              // step > num_training_steps: lr_end / base_lr
    EXPECT_DOUBLE_EQ(m(c, 1000), 0.1);
}

TEST(Schedules, PolynomialDependsOnBaseLr)
{
    // base lr 0.5, lr_end 0.1, power 2: (0.4 * pct^2 + 0.1) / 0.5.
    auto c = sched("polynomial", 2, 12);
    c.lr_end = 0.1;
    c.power = 2.0;
    EXPECT_DOUBLE_EQ(m(c, 7, 0.5), (0.4 * 0.25 + 0.1) / 0.5); // 0.4
    EXPECT_DOUBLE_EQ(m(c, 12, 0.5), 0.2);
    EXPECT_DOUBLE_EQ(m(c, 20, 0.5), 0.2);
    EXPECT_EQ(m(c, 1, 0.5), 0.5); // warmup ignores base_lr
}

TEST(Schedules, PolynomialPowerOneIsLinearToLrEnd)
{
    auto c = sched("polynomial", 0, 10);
    c.lr_end = 0.0;
    c.power = 1.0;
    EXPECT_DOUBLE_EQ(m(c, 0), 1.0);
    EXPECT_DOUBLE_EQ(m(c, 3), 0.7);
    EXPECT_DOUBLE_EQ(m(c, 10), 0.0);
    EXPECT_DOUBLE_EQ(m(c, 11), 0.0);
}

TEST(Schedules, PolynomialWarmupEqualsTraining)
{
    // transformers would divide by zero at step == T == W; we return lr_end / base_lr.
    auto c = sched("polynomial", 3, 3);
    c.lr_end = 0.25;
    EXPECT_EQ(m(c, 2), 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(m(c, 3), 0.25);
}

TEST(Schedules, Step)
{
    auto c = sched("step");
    c.step_size = 3;
    c.gamma = 0.5;
    EXPECT_EQ(m(c, 0), 1.0);
    EXPECT_EQ(m(c, 2), 1.0);
    EXPECT_EQ(m(c, 3), 0.5);
    EXPECT_EQ(m(c, 5), 0.5);
    EXPECT_EQ(m(c, 6), 0.25);
    EXPECT_EQ(m(c, 10), 0.125);
}

TEST(Schedules, Exponential)
{
    auto c = sched("exponential");
    c.gamma = 0.9;
    EXPECT_EQ(m(c, 0), 1.0);
    EXPECT_DOUBLE_EQ(m(c, 1), 0.9);
    EXPECT_DOUBLE_EQ(m(c, 3), 0.729);
    EXPECT_DOUBLE_EQ(m(c, 10), std::pow(0.9, 10));
}

TEST(Schedules, WarmupOfOneStep)
{
    auto c = sched("linear", 1, 5);
    EXPECT_EQ(m(c, 0), 0.0);
    EXPECT_EQ(m(c, 1), 1.0);
    EXPECT_EQ(m(c, 3), 0.5);
}

// DeepSpeed's schedules (deepspeed/runtime/lr_schedules.py), from iteration -1 (the lr set when the schedule is
// built); expected values computed with DeepSpeed's formulas in Python.
TEST(Schedules, DeepSpeedWarmupLR)
{
    auto c = sched("WarmupLR", 4);
    c.warmup_min_lr = 0.0;
    c.warmup_max_lr = 0.01;
    const double want[] = {0.0, 0.0, 0.005, 0.007924812503605782, 0.01, 0.01, 0.01, 0.01};
    for (int64_t i = -1; i < 7; ++i) EXPECT_DOUBLE_EQ(accel::scheduled_lr(c, i, 0.5), want[i + 1]) << i;
}

TEST(Schedules, DeepSpeedWarmupDecayLRLinear)
{
    auto c = sched("WarmupDecayLR", 3, 8);
    c.warmup_min_lr = 1e-4;
    c.warmup_max_lr = 0.01;
    c.log_warmup = false;
    const double want[] = {0.0001, 0.0001, 0.0034, 0.0067, 0.01, 0.008020000000000001, 0.00604, 0.004060000000000001,
                           0.0020800000000000003, 0.0001, 0.0001, 0.0001};
    for (int64_t i = -1; i < 11; ++i) EXPECT_NEAR(accel::scheduled_lr(c, i, 0.5), want[i + 1], 1e-17) << i;
}

TEST(Schedules, DeepSpeedWarmupCosineLR)
{
    auto c = sched("WarmupCosineLR", 3, 10);
    c.warmup_min_ratio = 0.1;
    c.cos_min_ratio = 1e-3;
    const double want[] = {0.0, 0.002, 0.01335673556428623, 0.02, 0.019010678990345167, 0.01623866312056875,
                           0.01223298413022358, 0.007787015869776421, 0.0037813368794312524, 0.0010093210096548339,
                           2e-05, 2e-05, 2e-05, 2e-05};
    for (int64_t i = -1; i < 13; ++i) EXPECT_NEAR(accel::scheduled_lr(c, i, 0.02), want[i + 1], 1e-17) << i;
}

TEST(Schedules, DeepSpeedWarmupStepsAtLeastTwo)
{
    auto c = sched("WarmupLR", 1); // DeepSpeed clamps warmup_num_steps to 2
    c.warmup_max_lr = 1.0;
    EXPECT_DOUBLE_EQ(accel::scheduled_lr(c, 0, 1.0), 0.0);
    EXPECT_DOUBLE_EQ(accel::scheduled_lr(c, 1, 1.0), 1.0);
}
