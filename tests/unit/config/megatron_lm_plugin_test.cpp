// config/megatron_lm_plugin: MegatronLMPlugin's pipeline keys and the environment `accelerate launch
// --use_megatron_lm --megatron_lm_*` exports, mapped onto parallelism_config; what accel cannot honour refused by name.
#include "common/error.hpp"
#include "config/accelerator_config.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

using accel::Error;
using accel::config::AcceleratorConfig;
using accel::config::parse_accelerator_config;

namespace {

const char *const kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_USE_MEGATRON_LM",
                             "MEGATRON_LM_TP_DEGREE", "MEGATRON_LM_PP_DEGREE", "MEGATRON_LM_NUM_MICRO_BATCHES",
                             "MEGATRON_LM_GRADIENT_CLIPPING", "MEGATRON_LM_SEQUENCE_PARALLELISM",
                             "MEGATRON_LM_RECOMPUTE_ACTIVATION", "MEGATRON_LM_RECOMPUTE_ACTIVATIONS",
                             "MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER", "ACCELERATE_USE_PARALLELISM_CONFIG",
                             "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED"};

// A job of 4 processes as the launcher describes it (rank 0); every variable above restored after.
class MegatronLmPluginTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        for (const char *v : kVars)
            if (const char *x = std::getenv(v)) saved_[v] = x;
        for (const char *v : kVars) unsetenv(v);
        setenv("WORLD_SIZE", "4", 1);
        setenv("RANK", "0", 1);
        setenv("LOCAL_WORLD_SIZE", "4", 1);
        setenv("LOCAL_RANK", "0", 1);
    }
    void TearDown() override
    {
        for (const char *v : kVars) unsetenv(v);
        for (const auto &kv : saved_) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }

private:
    std::map<std::string, std::string> saved_;
};

Error error_of(const std::string &json)
{
    try {
        parse_accelerator_config(json.c_str());
    } catch (const Error &e) {
        return e;
    }
    return Error(ACCEL_OK, "no error");
}

#define EXPECT_REFUSED(json, status, text)                                                                             \
    do {                                                                                                               \
        const Error e_ = error_of(json);                                                                               \
        EXPECT_EQ(e_.code(), status) << e_.what();                                                                     \
        EXPECT_NE(std::string(e_.what()).find(text), std::string::npos) << e_.what();                                  \
    } while (0)

TEST_F(MegatronLmPluginTest, PipelineKeysMapOntoParallelismConfig)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"megatron_lm_plugin\": {\"pp_degree\": 2, \"num_micro_batches\": 4, \"gradient_clipping\": 0}}");
    EXPECT_TRUE(c.parallelism.given);
    EXPECT_EQ(c.parallelism.pp_size, 2);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2); // Megatron's data-parallel size: world / (tp x pp)
    EXPECT_EQ(c.parallelism.num_micro_batches, 4);
    EXPECT_EQ(c.parallelism.pp_schedule, "1f1b"); // Megatron's schedule without virtual stages
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"pp_degree\": 4, \"num_micro_batches\": 8, "
                                 "\"num_layers_per_virtual_pipeline_stage\": 2, \"gradient_clipping\": 0.0}}");
    EXPECT_EQ(c.parallelism.pp_size, 4);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 1);
    EXPECT_EQ(c.parallelism.pp_schedule, "interleaved_1f1b");
    EXPECT_EQ(c.parallelism.num_layers_per_virtual_pipeline_stage, 2);
    // pp_degree 1: data parallelism, as without the plugin.
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}");
    EXPECT_EQ(c.parallelism.pp_size, 1);
    EXPECT_EQ(c.parallelism.num_micro_batches, 1);
    // ... whose batches Megatron still splits into num_micro_batches (train_step does: tests/capi/test_megatron_step.c).
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"num_micro_batches\": 2}}");
    EXPECT_EQ(c.parallelism.pp_size, 1);
    EXPECT_FALSE(c.parallelism.given);
    EXPECT_EQ(c.parallelism.num_micro_batches, 2);
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"tp_degree\": 2, \"num_micro_batches\": 4}}");
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.num_micro_batches, 4);
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"num_micro_batches\": 2}, \"parallelism_config\": {\"pp_size\": 2, "
                   "\"dp_replicate_size\": 2, \"num_micro_batches\": 4}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin.num_micro_batches with parallelism_config's pipeline");
}

TEST_F(MegatronLmPluginTest, LauncherEnvironment)
{
    // What accelerate launch --use_megatron_lm --megatron_lm_pp_degree 2 --megatron_lm_num_micro_batches 8
    // --megatron_lm_gradient_clipping 0 exports.
    setenv("ACCELERATE_USE_MEGATRON_LM", "true", 1);
    setenv("MEGATRON_LM_TP_DEGREE", "1", 1);
    setenv("MEGATRON_LM_PP_DEGREE", "2", 1);
    setenv("MEGATRON_LM_NUM_MICRO_BATCHES", "8", 1);
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "0.0", 1);
    setenv("MEGATRON_LM_SEQUENCE_PARALLELISM", "False", 1);
    AcceleratorConfig c = parse_accelerator_config("{}");
    EXPECT_EQ(c.parallelism.pp_size, 2);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
    EXPECT_EQ(c.parallelism.num_micro_batches, 8);
    EXPECT_EQ(c.sharding.gradient_clipping, 0.0);
    // The launcher's default clipping (1.0): Megatron's clipping inside the optimizer step.
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "1.0", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.gradient_clipping, 1.0);
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "0", 1);
    setenv("MEGATRON_LM_PP_DEGREE", "3", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "MEGATRON_LM_PP_DEGREE: tp_degree (1) x pp_degree (3) does not divide the job's 4 processes");
    setenv("MEGATRON_LM_PP_DEGREE", "two", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "MEGATRON_LM_PP_DEGREE: expected a positive integer");
    // Out of int's range, infinite or not a number: refused, never converted (undefined behaviour).
    for (const char *bad : {"1e30", "inf", "nan", "-2", "2.5"}) {
        setenv("MEGATRON_LM_PP_DEGREE", bad, 1);
        EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "MEGATRON_LM_PP_DEGREE: expected a positive integer");
    }
    setenv("MEGATRON_LM_PP_DEGREE", "2", 1);
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "-1", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "MEGATRON_LM_GRADIENT_CLIPPING: expected a number >= 0");
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "nan", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "MEGATRON_LM_GRADIENT_CLIPPING: expected a number >= 0");
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "0", 1);
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_size\": 2, \"dp_replicate_size\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "the MEGATRON_LM_* environment (ACCELERATE_USE_MEGATRON_LM) with parallelism_config");
    setenv("MEGATRON_LM_PP_DEGREE", "2", 1);
    EXPECT_FALSE(parse_accelerator_config("{}").selective_recompute);
    setenv("MEGATRON_LM_RECOMPUTE_ACTIVATIONS", "True", 1); // what the launcher exports; the plugin reads either
    EXPECT_TRUE(parse_accelerator_config("{}").selective_recompute);
    setenv("MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER", "true", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_UNIMPLEMENTED, "environment variable MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER: ");
    unsetenv("ACCELERATE_USE_MEGATRON_LM"); // without it the variables are not read, as in Accelerate
    EXPECT_EQ(parse_accelerator_config("{}").parallelism.pp_size, 1);
}

TEST_F(MegatronLmPluginTest, TensorParallelismAndItsSequenceParallelismMapOntoTheMesh)
{
    // tp_degree alone: tp_size, the rest replicating (Megatron's data-parallel size world / tp).
    AcceleratorConfig c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"tp_degree\": 2, \"gradient_clipping\": 0}}");
    EXPECT_TRUE(c.parallelism.given);
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.pp_size, 1);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
    EXPECT_FALSE(c.parallelism.sequence_parallel);
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"tp_degree\": 4, \"sequence_parallelism\": true, "
                                 "\"gradient_clipping\": 0}}");
    EXPECT_EQ(c.parallelism.tp_size, 4);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 1);
    EXPECT_TRUE(c.parallelism.sequence_parallel); // tp_handler.sequence_parallel
    // pp x tp: each stage split over tp (Megatron's layout: tp fastest, then dp, then pp).
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"tp_degree\": 2, \"pp_degree\": 2, \"num_micro_batches\": 2, "
                                 "\"sequence_parallelism\": true, \"gradient_clipping\": 0}}");
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.pp_size, 2);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 1);
    EXPECT_EQ(c.parallelism.num_micro_batches, 2);
    EXPECT_TRUE(c.parallelism.sequence_parallel);
    // Megatron turns sequence parallelism off when tp is 1: nothing to split over.
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"pp_degree\": 2, \"sequence_parallelism\": true, "
                                 "\"gradient_clipping\": 0}}");
    EXPECT_FALSE(c.parallelism.sequence_parallel);
    EXPECT_EQ(c.parallelism.tp_size, 1);
    // The launcher's variables alike.
    setenv("ACCELERATE_USE_MEGATRON_LM", "true", 1);
    setenv("MEGATRON_LM_TP_DEGREE", "2", 1);
    setenv("MEGATRON_LM_PP_DEGREE", "1", 1);
    setenv("MEGATRON_LM_GRADIENT_CLIPPING", "0.0", 1);
    setenv("MEGATRON_LM_SEQUENCE_PARALLELISM", "True", 1);
    c = parse_accelerator_config("{}");
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
    EXPECT_TRUE(c.parallelism.sequence_parallel);
    setenv("MEGATRON_LM_TP_DEGREE", "3", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT,
                   "environment variable MEGATRON_LM_TP_DEGREE: tp_degree (3) x pp_degree (1) does not divide the job's 4");
}

// Megatron clips the gradients inside its train step: the value goes where the optimizer step's clipping reads it
// (tests/capi/test_megatron_step.c trains with it).
TEST_F(MegatronLmPluginTest, GradientClippingIsTheStepsClipping)
{
    EXPECT_EQ(parse_accelerator_config("{\"megatron_lm_plugin\": {\"pp_degree\": 2}}").sharding.gradient_clipping, 1.0);
    EXPECT_EQ(parse_accelerator_config("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0.25}}").sharding.gradient_clipping, 0.25);
    EXPECT_EQ(parse_accelerator_config("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}").sharding.gradient_clipping, 0.0);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.gradient_clipping, 0.0);
    // The distributed optimizer (ZeRO-1) clips in its engine's step.
    AcceleratorConfig c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"use_distributed_optimizer\": true}}");
    EXPECT_EQ(c.sharding.frontend, "deepspeed");
    EXPECT_EQ(c.sharding.gradient_clipping, 1.0);
    // deepspeed_plugin's clipping: the same value or either 0, else refused (which would the step use?).
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {}, \"deepspeed_plugin\": {\"gradient_clipping\": 1.0}}");
    EXPECT_EQ(c.sharding.gradient_clipping, 1.0);
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}, \"deepspeed_plugin\": {\"gradient_clipping\": 0.5}}");
    EXPECT_EQ(c.sharding.gradient_clipping, 0.5);
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {}, \"deepspeed_plugin\": {\"gradient_clipping\": 0.5}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin.gradient_clipping (1.000000) with deepspeed_plugin's "
                                               "gradient_clipping (0.500000)");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"gradient_clipping\": -1}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "megatron_lm_plugin.gradient_clipping");
}

TEST_F(MegatronLmPluginTest, RecomputeActivationIsSelectiveRecomputation)
{
    EXPECT_FALSE(parse_accelerator_config("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}").selective_recompute);
    EXPECT_TRUE(parse_accelerator_config("{\"megatron_lm_plugin\": {\"recompute_activation\": true, \"gradient_clipping\": 0}}")
                    .selective_recompute);
    EXPECT_FALSE(parse_accelerator_config("{}").selective_recompute); // without the plugin
}

TEST_F(MegatronLmPluginTest, DistributedOptimizerIsZeroStage1)
{
    AcceleratorConfig c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"gradient_clipping\": 0}}");
    EXPECT_FALSE(c.sharding.enabled());
    c = parse_accelerator_config("{\"megatron_lm_plugin\": {\"use_distributed_optimizer\": true, \"gradient_clipping\": 0}}");
    EXPECT_EQ(c.sharding.frontend, "deepspeed");
    EXPECT_EQ(c.sharding.zero_stage, 1);
    EXPECT_TRUE(c.sharding.shard_optimizer);
    EXPECT_FALSE(c.sharding.shard_gradients);
    EXPECT_FALSE(c.sharding.shard_parameters);
    EXPECT_FALSE(c.parallelism.given); // every process one data-parallel replica, as Megatron's dp group
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"use_distributed_optimizer\": true, \"gradient_clipping\": 0}, "
                   "\"fsdp_plugin\": {}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin.use_distributed_optimizer with fsdp_plugin");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"tp_degree\": 2, \"use_distributed_optimizer\": true, \"gradient_clipping\": 0}}",
                   ACCEL_ERR_UNIMPLEMENTED, "megatron_lm_plugin.use_distributed_optimizer: Megatron's distributed optimizer");
}

TEST_F(MegatronLmPluginTest, WhatAccelCannotHonourIsRefusedByName)
{
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"pp_degree\": 2, \"use_distributed_optimizer\": true, \"gradient_clipping\": 0}}",
                   ACCEL_ERR_UNIMPLEMENTED, "megatron_lm_plugin.use_distributed_optimizer");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"tp_degree\": 2, \"gradient_clipping\": 0}, \"fsdp_plugin\": {}}",
                   ACCEL_ERR_UNIMPLEMENTED, "megatron_lm_plugin.tp_degree: Megatron's tensor parallelism with fsdp_plugin");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"tp_degree\": 2, \"gradient_clipping\": 0}, \"parallelism_config\": "
                   "{\"tp_size\": 2, \"dp_replicate_size\": 2}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin with parallelism_config");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"pp_degree\": 2, \"train_iters\": 100, \"gradient_clipping\": 0}}",
                   ACCEL_ERR_UNIMPLEMENTED, "megatron_lm_plugin.train_iters: Megatron-LM's own training loop");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"pp_degree\": 2, \"gradient_clipping\": 0}, \"parallelism_config\": {\"pp_size\": 2, "
                   "\"dp_replicate_size\": 2}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "megatron_lm_plugin with parallelism_config");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"num_layers_per_virtual_pipeline_stage\": 1, \"gradient_clipping\": 0}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "needs pp_degree above 1");
    EXPECT_REFUSED("{\"megatron_lm_plugin\": {\"pp_degree\": 2, \"gradient_clipping\": 0, \"pp_dgree\": 2}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "pp_dgree");
}

} // namespace
