// config/scheduler_config: required keys per schedule type, ranges, unknown keys.
#include "common/error.hpp"
#include "config/scheduler_config.hpp"

#include <gtest/gtest.h>

#include <string>

using accel::config::parse_scheduler_config;

namespace {

accel::Error sched_error(const char *json)
{
    try {
        parse_scheduler_config(json);
    } catch (const accel::Error &e) {
        return e;
    }
    ADD_FAILURE() << "expected an accel::Error for " << json;
    return accel::Error(ACCEL_OK, "");
}

#define EXPECT_SCHED_ERROR(json, msg_)                                                                                 \
    do {                                                                                                               \
        accel::Error e_ = sched_error(json);                                                                           \
        EXPECT_EQ(e_.code(), ACCEL_ERR_INVALID_ARGUMENT) << e_.what();                                                 \
        EXPECT_EQ(std::string(e_.what()), std::string(msg_));                                                          \
    } while (0)

} // namespace

TEST(SchedulerConfig, Values)
{
    auto c = parse_scheduler_config("{\"type\": \"cosine\", \"num_warmup_steps\": 10, \"num_training_steps\": 100,"
                                    " \"num_cycles\": 2}");
    EXPECT_EQ(c.type, "cosine");
    EXPECT_EQ(c.num_warmup_steps, 10);
    EXPECT_EQ(c.num_training_steps, 100);
    EXPECT_DOUBLE_EQ(c.num_cycles, 2.0);
    auto p = parse_scheduler_config("{\"type\": \"polynomial\", \"num_training_steps\": 5}");
    EXPECT_DOUBLE_EQ(p.lr_end, 1e-7);
    EXPECT_DOUBLE_EQ(p.power, 1.0);
    auto s = parse_scheduler_config("{\"type\": \"step\", \"step_size\": 3}");
    EXPECT_EQ(s.step_size, 3);
    EXPECT_DOUBLE_EQ(s.gamma, 0.1);
    EXPECT_EQ(parse_scheduler_config("{\"type\": \"constant\"}").num_warmup_steps, 0);
}

TEST(SchedulerConfig, Errors)
{
    EXPECT_SCHED_ERROR("{}", "type: required (\"constant\", \"linear\", \"cosine\", \"step\", \"exponential\", "
                             "\"polynomial\" or \"dummy\")");
    EXPECT_SCHED_ERROR("{\"type\": \"linear\"}", "num_training_steps: required for a linear schedule");
    EXPECT_SCHED_ERROR("{\"type\": \"linear\", \"num_training_steps\": 5, \"num_warmup_steps\": 6}",
                       "num_warmup_steps: expected at most num_training_steps (5), got 6");
    EXPECT_SCHED_ERROR("{\"type\": \"step\"}", "step_size: required for a step schedule");
    EXPECT_SCHED_ERROR("{\"type\": \"exponential\"}", "gamma: required for an exponential schedule");
    EXPECT_SCHED_ERROR("{\"type\": \"exponential\", \"gamma\": 0}", "gamma: expected a number > 0, got 0");
    // Keys of another schedule type are unknown here.
    EXPECT_SCHED_ERROR("{\"type\": \"constant\", \"gamma\": 0.5}",
                       "gamma: unknown key (known keys: num_warmup_steps, type)");
    EXPECT_SCHED_ERROR("{\"type\": \"polynomial\", \"num_training_steps\": 5, \"power\": 0}",
                       "power: expected a number > 0, got 0");
}
