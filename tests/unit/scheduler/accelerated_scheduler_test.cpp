// scheduler/accelerated_scheduler: Accelerate's stepping rules (training-semantics.md §4).
#include "common/error.hpp"
#include "config/optimizer_config.hpp"
#include "config/scheduler_config.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "scheduler/accelerated_scheduler.hpp"
#include "state/accelerator_state.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <memory>

using accel::AcceleratedOptimizer;
using accel::AcceleratedScheduler;
using accel::AcceleratorState;

namespace {

std::shared_ptr<AcceleratedOptimizer> sgd(double lr)
{
    at::manual_seed(0);
    auto model = accel::make_model_from_json("{\"type\": \"mlp\", \"widths\": [2, 2]}");
    return std::make_shared<AcceleratedOptimizer>(
        model, accel::config::parse_optimizer_config(("{\"type\": \"sgd\", \"lr\": " + std::to_string(lr) + "}").c_str()));
}

accel::config::SchedulerConfig linear10()
{
    return accel::config::parse_scheduler_config("{\"type\": \"linear\", \"num_training_steps\": 10}");
}

std::shared_ptr<AcceleratorState> state(int32_t world_size, bool split, bool step_with_optimizer = true)
{
    accel::config::AcceleratorConfig c;
    c.topology.world_size = world_size;
    c.topology.local_world_size = world_size;
    c.dataloader.split_batches = split;
    c.step_scheduler_with_optimizer = step_with_optimizer;
    return std::make_shared<AcceleratorState>(c);
}

} // namespace

TEST(AcceleratedScheduler, ConstructionSetsStepZeroLr)
{
    auto opt = sgd(1.0);
    AcceleratedScheduler s(opt, accel::config::parse_scheduler_config(
                                    "{\"type\": \"linear\", \"num_warmup_steps\": 2, \"num_training_steps\": 10}"));
    EXPECT_EQ(s.step_count(), 0);
    EXPECT_EQ(s.last_lr(), 0.0);
    EXPECT_EQ(opt->lr(), 0.0);
    s.step();
    EXPECT_EQ(s.last_lr(), 0.5);
    EXPECT_EQ(opt->lr(), 0.5);
}

TEST(AcceleratedScheduler, UnpreparedStepsEveryCall)
{
    auto opt = sgd(1.0);
    AcceleratedScheduler s(opt, linear10());
    for (int i = 0; i < 3; ++i) s.step();
    EXPECT_EQ(s.step_count(), 3);
    EXPECT_DOUBLE_EQ(opt->lr(), 0.7);
}

TEST(AcceleratedScheduler, NothingWhileAccumulating)
{
    auto opt = sgd(1.0);
    AcceleratedScheduler s(opt, linear10());
    s.prepared_by = state(1, false);
    s.prepared_by->gradient.set_sync_gradients(false);
    s.step();
    EXPECT_EQ(s.step_count(), 0);
    s.prepared_by->gradient.set_sync_gradients(true);
    s.step();
    EXPECT_EQ(s.step_count(), 1);
}

TEST(AcceleratedScheduler, StepsNumProcessesTimesUnlessSplitBatches)
{
    auto opt = sgd(1.0);
    AcceleratedScheduler s(opt, linear10());
    s.prepared_by = state(2, false);
    s.step();
    EXPECT_EQ(s.step_count(), 2);
    EXPECT_DOUBLE_EQ(opt->lr(), 0.8);

    AcceleratedScheduler split(sgd(1.0), linear10());
    split.prepared_by = state(2, true);
    split.step();
    EXPECT_EQ(split.step_count(), 1);
}

TEST(AcceleratedScheduler, StepSchedulerWithOptimizerOff)
{
    AcceleratedScheduler s(sgd(1.0), linear10());
    s.prepared_by = state(2, false, false);
    s.prepared_by->gradient.set_sync_gradients(false);
    s.step(); // forwarded every call, once
    EXPECT_EQ(s.step_count(), 1);
}

TEST(AcceleratedScheduler, PolynomialValidation)
{
    auto poly = accel::config::parse_scheduler_config(
        "{\"type\": \"polynomial\", \"num_training_steps\": 10, \"lr_end\": 0.5}");
    try {
        AcceleratedScheduler s(sgd(0.1), poly);
        FAIL() << "expected an error";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_INVALID_ARGUMENT);
        EXPECT_STREQ(e.what(), "lr_end: must be smaller than the optimizer's lr (0.100000), got 0.500000");
    }
    AcceleratedScheduler ok(sgd(1.0), poly);
    EXPECT_DOUBLE_EQ(ok.last_lr(), 1.0);
}
