// config/parallelism_config: parallelism_config's keys and checks, and the PARALLELISM_CONFIG_* environment
// read as Accelerate reads it (only with ACCELERATE_USE_PARALLELISM_CONFIG=true, or under a given object).
#include "common/error.hpp"
#include "config/accelerator_config.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <unistd.h>

using accel::Error;
using accel::config::AcceleratorConfig;
using accel::config::parse_accelerator_config;
using accel::config::to_json;

namespace {

const char *const kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "ACCELERATE_USE_PARALLELISM_CONFIG",
                             "PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "PARALLELISM_CONFIG_DP_SHARD_SIZE",
                             "PARALLELISM_CONFIG_TP_SIZE", "PARALLELISM_CONFIG_CP_SIZE", "PARALLELISM_CONFIG_SP_SIZE", "PARALLELISM_CONFIG_PP_SIZE",
                             "PARALLELISM_CONFIG_CP_BACKEND", "PARALLELISM_CONFIG_SP_BACKEND", "ACCELERATE_USE_FSDP",
                             "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_MIXED_PRECISION",
                             "PARALLELISM_CONFIG_SP_SEQ_LENGTH", "PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE",
                             "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"};

// A job of `world` processes as the launcher describes it (rank 0); every variable above restored after.
class ParallelismConfigTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        for (const char *v : kVars)
            if (const char *x = std::getenv(v)) saved_[v] = x;
        for (const char *v : kVars) unsetenv(v);
    }
    void TearDown() override
    {
        for (const char *v : kVars) unsetenv(v);
        for (const auto &kv : saved_) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
    static void world(int n)
    {
        setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
        setenv("RANK", "0", 1);
        setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
        setenv("LOCAL_RANK", "0", 1);
    }

private:
    std::map<std::string, std::string> saved_;
};

// The error parse_accelerator_config throws (code ACCEL_OK when none: the test then fails on the code).
Error error_of(const std::string &json)
{
    try {
        parse_accelerator_config(json.c_str());
    } catch (const Error &e) {
        return e;
    }
    return Error(ACCEL_OK, "no error for " + json);
}

#define EXPECT_REFUSED(json, code_, text)                                                                              \
    do {                                                                                                               \
        const Error e_ = error_of(json);                                                                               \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_NE(std::string(e_.what()).find(text), std::string::npos) << e_.what();                                  \
    } while (0)

} // namespace

TEST_F(ParallelismConfigTest, AbsentOrNullIsNotGiven)
{
    world(2);
    EXPECT_FALSE(parse_accelerator_config("{}").parallelism.given);
    EXPECT_FALSE(parse_accelerator_config("{\"parallelism_config\": null}").parallelism.given);
    // The environment alone counts only with ACCELERATE_USE_PARALLELISM_CONFIG=true, as in Accelerate.
    setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "2", 1);
    EXPECT_FALSE(parse_accelerator_config("{}").parallelism.given);
}

TEST_F(ParallelismConfigTest, DataDimensions)
{
    world(4);
    const AcceleratorConfig c = parse_accelerator_config(
        "{\"fsdp_plugin\": {}, \"parallelism_config\": {\"dp_replicate_size\": 2, \"dp_shard_size\": 2}}");
    EXPECT_TRUE(c.parallelism.given);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
    EXPECT_EQ(c.parallelism.dp_shard_size, 2);
    EXPECT_EQ(c.parallelism.tp_size, 1);
    EXPECT_NE(to_json(c).find("\"parallelism_config\""), std::string::npos);
    // All ones on several processes: dp_replicate takes them all (DDP), as Accelerate's _validate_accelerator.
    const AcceleratorConfig d = parse_accelerator_config("{\"parallelism_config\": {}}");
    EXPECT_EQ(d.parallelism.dp_replicate_size, 4);
    // Handlers and backends under Accelerate's names.
    parse_accelerator_config("{\"parallelism_config\": {\"dp_replicate_size\": 4, \"cp_backend\": \"torch\", \"sp_backend\": "
                             "\"deepspeed\", \"tp_handler\": {\"enable_async_tp\": false}, \"cp_handler\": "
                             "{\"cp_comm_strategy\": \"alltoall\"}, \"sp_handler\": {\"sp_seq_length\": 128, "
                             "\"sp_seq_length_is_variable\": true, \"sp_attn_implementation\": \"sdpa\"}}}");
}

TEST_F(ParallelismConfigTest, EnvironmentAsAccelerateReadsIt)
{
    world(4);
    setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true", 1);
    setenv("ACCELERATE_USE_FSDP", "true", 1);
    setenv("PARALLELISM_CONFIG_DP_REPLICATE_SIZE", "2", 1);
    setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "2", 1);
    AcceleratorConfig c = parse_accelerator_config("{}");
    EXPECT_TRUE(c.parallelism.given);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
    EXPECT_EQ(c.parallelism.dp_shard_size, 2);
    // A JSON key wins over its variable; the others still come from the environment.
    c = parse_accelerator_config("{\"parallelism_config\": {\"dp_replicate_size\": 1, \"dp_shard_size\": 4}}");
    EXPECT_EQ(c.parallelism.dp_replicate_size, 1);
    EXPECT_EQ(c.parallelism.dp_shard_size, 4);
    setenv("PARALLELISM_CONFIG_TP_SIZE", "two", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "PARALLELISM_CONFIG_TP_SIZE");
    setenv("PARALLELISM_CONFIG_TP_SIZE", "2", 1);
    // Tensor parallelism inside FSDP/ZeRO (ACCELERATE_USE_FSDP is set): the engine shards each rank's tp slices.
    c = parse_accelerator_config("{\"parallelism_config\": {\"dp_shard_size\": 1}}");
    EXPECT_TRUE(c.sharding.enabled());
    EXPECT_EQ(c.parallelism.tp_size, 2);
    unsetenv("ACCELERATE_USE_FSDP");
    c = parse_accelerator_config("{\"parallelism_config\": {\"dp_shard_size\": 1}}");
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
}

TEST_F(ParallelismConfigTest, UnbuiltDimensionsAreUnimplementedByName)
{
    world(4);
    // tp x dp_shard (TP inside FSDP/ZeRO) is built; dp_shard_size still needs a sharding plugin.
    EXPECT_EQ(parse_accelerator_config("{\"fsdp_plugin\": {}, \"parallelism_config\": {\"dp_shard_size\": 2, \"tp_size\": 2}}")
                  .parallelism.tp_size,
              2);
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_shard_size\": 2, \"tp_size\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_shard_size: 2 shards the model, which needs fsdp_plugin or deepspeed_plugin");
    // Context parallelism is built with DDP, TP and the sharding engine (which shards over dp_shard_cp).
    EXPECT_EQ(parse_accelerator_config("{\"fsdp_plugin\": {}, \"parallelism_config\": {\"dp_shard_size\": 2, \"cp_size\": 2}}")
                  .parallelism.cp_size,
              2);
    auto c = accel::config::parse_accelerator_config(
        "{\"parallelism_config\": {\"cp_size\": 2, \"tp_size\": 2, \"cp_handler\": {\"cp_comm_strategy\": \"alltoall\"}}}");
    EXPECT_EQ(c.parallelism.cp_size, 2);
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.cp_comm_strategy, "alltoall");
    // Megatron's sequence parallelism rides on tensor parallelism: named when tp_size is 1.
    EXPECT_TRUE(parse_accelerator_config(
                    "{\"parallelism_config\": {\"tp_size\": 4, \"tp_handler\": {\"sequence_parallel\": true}}}")
                    .parallelism.sequence_parallel);
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_replicate_size\": 4, \"tp_handler\": {\"sequence_parallel\": true}}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.tp_handler.sequence_parallel: splits the sequence");
    // Ulysses (sp_size) runs on the cp axis: alone, with the data dimensions and TP, not with cp_size.
    c = accel::config::parse_accelerator_config("{\"parallelism_config\": {\"sp_size\": 4}}");
    EXPECT_EQ(c.parallelism.sp_size, 4);
    EXPECT_EQ(c.parallelism.sequence_parallel_size(), 4);
    EXPECT_EQ(c.parallelism.sequence_strategy(), "ulysses");
    EXPECT_REFUSED("{\"parallelism_config\": {\"sp_size\": 2, \"cp_size\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config: cp_size (2) with sp_size (2): context and Ulysses sequence parallelism "
                   "are mutually exclusive");
    // Pipeline stages compose with DDP (pp x dp_replicate) and TP (pp x tp, sequence parallelism too) and run
    // GPipe, 1F1B or interleaved 1F1B; nothing else yet.
    c = parse_accelerator_config("{\"parallelism_config\": {\"pp_size\": 2, \"dp_replicate_size\": 2, \"pp_schedule\": \"1f1b\"}}");
    EXPECT_EQ(c.parallelism.pp_size, 2);
    EXPECT_EQ(c.parallelism.pp_schedule, "1f1b");
    c = parse_accelerator_config("{\"parallelism_config\": {\"pp_size\": 2, \"tp_size\": 2, \"tp_handler\": "
                                 "{\"sequence_parallel\": true}}}");
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_TRUE(c.parallelism.sequence_parallel);
    // ... and context or Ulysses parallelism inside each stage (pp x cp, pp x sp, with tp and dp too).
    c = parse_accelerator_config("{\"parallelism_config\": {\"pp_size\": 2, \"cp_size\": 2, \"cp_handler\": "
                                 "{\"cp_comm_strategy\": \"alltoall\"}}}");
    EXPECT_EQ(c.parallelism.cp_size, 2);
    EXPECT_EQ(c.parallelism.sequence_strategy(), "alltoall");
    c = parse_accelerator_config("{\"parallelism_config\": {\"pp_size\": 2, \"sp_size\": 2}}");
    EXPECT_EQ(c.parallelism.sequence_strategy(), "ulysses");
    EXPECT_EQ(c.parallelism.pp_size * c.parallelism.sequence_parallel_size(), 4);
    // Interleaved 1F1B takes its chunks per stage by Megatron's names (either implies the schedule); the
    // blocks per chunk meet the model at prepare (PipelineStages.ChunksPerStage).
    c = parse_accelerator_config("{\"parallelism_config\": {\"pp_size\": 2, \"dp_replicate_size\": 2, \"pp_schedule\": "
                                 "\"interleaved_1f1b\", \"num_layers_per_virtual_pipeline_stage\": 3}}");
    EXPECT_EQ(c.parallelism.pp_schedule, "interleaved_1f1b");
    EXPECT_EQ(c.parallelism.num_layers_per_virtual_pipeline_stage, 3);
    c = parse_accelerator_config("{\"parallelism_config\": {\"pp_size\": 4, \"num_virtual_stages_per_pipeline_rank\": 2, "
                                 "\"pp_split_points\": [1, 2, 3, 4, 5, 6, 7]}}");
    EXPECT_EQ(c.parallelism.pp_schedule, "interleaved_1f1b");
    EXPECT_EQ(c.parallelism.num_virtual_stages_per_pipeline_rank, 2);
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_size\": 2, \"dp_replicate_size\": 2, \"pp_schedule\": \"interleaved_1f1b\"}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.pp_schedule: \"interleaved_1f1b\" needs the model chunks");
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_size\": 4, \"pp_schedule\": \"1f1b\", \"num_layers_per_virtual_pipeline_stage\": 1}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.num_layers_per_virtual_pipeline_stage: model chunks per "
                   "stage need pp_schedule \"interleaved_1f1b\", not \"1f1b\"");
    EXPECT_REFUSED("{\"parallelism_config\": {\"tp_size\": 2, \"tp_handler\": {\"enable_async_tp\": true}}}",
                   ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.tp_handler.enable_async_tp: true is not built yet");
}

// With pp_size 1 no pipeline is built: the keys that shape one are refused by name instead of parsed and
// ignored (pp_size from the environment counts); num_micro_batches 1 and gpipe/1f1b are what one stage runs.
TEST_F(ParallelismConfigTest, PipelineKeysNeedPipelineStages)
{
    world(4);
    const std::string tail = ": shapes a pipeline, but pp_size is 1";
    EXPECT_REFUSED("{\"parallelism_config\": {\"num_micro_batches\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.num_micro_batches" + tail);
    EXPECT_REFUSED("{\"parallelism_config\": {\"num_layers_per_virtual_pipeline_stage\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.num_layers_per_virtual_pipeline_stage" + tail);
    EXPECT_REFUSED("{\"parallelism_config\": {\"num_virtual_stages_per_pipeline_rank\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.num_virtual_stages_per_pipeline_rank" + tail);
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_schedule\": \"interleaved_1f1b\", \"num_virtual_stages_per_pipeline_rank\": 2}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.num_virtual_stages_per_pipeline_rank" + tail);
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_split_points\": []}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.pp_split_points" + tail);
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_replicate_size\": 4, \"pp_split_points\": [2]}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.pp_split_points" + tail);
    const auto c = parse_accelerator_config("{\"parallelism_config\": {\"num_micro_batches\": 1, \"pp_schedule\": \"1f1b\"}}");
    EXPECT_EQ(c.parallelism.pp_size, 1);
    // The environment's pp_size is the one that counts: with it the keys shape the pipeline.
    setenv("PARALLELISM_CONFIG_PP_SIZE", "2", 1);
    EXPECT_EQ(parse_accelerator_config("{\"parallelism_config\": {\"dp_replicate_size\": 2, \"num_micro_batches\": 2}}")
                  .parallelism.num_micro_batches,
              2);
    setenv("PARALLELISM_CONFIG_PP_SIZE", "1", 1);
    EXPECT_REFUSED("{\"parallelism_config\": {\"num_micro_batches\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.num_micro_batches" + tail);
    unsetenv("PARALLELISM_CONFIG_PP_SIZE");
}

TEST_F(ParallelismConfigTest, BadConfigsNameTheKey)
{
    world(4);
    EXPECT_REFUSED("{\"fsdp_plugin\": {}, \"parallelism_config\": {\"dp_replicate_size\": 2, \"dp_shard_size\": 4}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "= 8 processes, but the job has 4");
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_shard_size\": 0}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_shard_size: must be at least 1, got 0");
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_replicate_size\": -1}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_replicate_size: must be at least 1, got -1");
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_shard_size\": \"4\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_shard_size");
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_shard_size\": 2.5}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_shard_size");
    // Pipeline stages count in the job's processes; a schedule has one of the known names.
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_size\": 2}}", ACCEL_ERR_INVALID_ARGUMENT, "x pp_size (2) = 2 processes");
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_schedule\": \"zero_bubble\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.pp_schedule");
    EXPECT_REFUSED("{\"parallelism_config\": {\"num_micro_batches\": 0}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.num_micro_batches");
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_split_points\": [2]}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.pp_split_points");
    EXPECT_REFUSED("{\"parallelism_config\": {\"cp_handler\": {\"cp_comm_strategy\": \"ring\"}}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.cp_handler.cp_comm_strategy");
    EXPECT_REFUSED("{\"parallelism_config\": {\"tp_handler\": {\"async\": true}}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.tp_handler.async");
    EXPECT_REFUSED("{\"parallelism_config\": 4}", ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config");
    // Sharding the model needs a sharding plugin; HYBRID_SHARD's replicas must be the mesh's.
    EXPECT_REFUSED("{\"parallelism_config\": {\"dp_shard_size\": 4}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_shard_size: 4 shards the model, which needs fsdp_plugin or deepspeed_plugin");
    setenv("LOCAL_WORLD_SIZE", "2", 1); // two nodes of two
    EXPECT_REFUSED("{\"fsdp_plugin\": {\"sharding_strategy\": \"HYBRID_SHARD\"}, \"parallelism_config\": {\"dp_shard_size\": 4}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.sharding_strategy: HYBRID_SHARD with parallelism_config");
}

// sp_handler (DeepSpeedSequenceParallelConfig) as Accelerate reads it: a fixed length must be given with
// sp_seq_length_is_variable false (the prepared loader then checks every batch against it:
// ContextParallelGpt.RefusesWhatItCannotSplit), and the attention kernels accel does not have are refused by name.
TEST_F(ParallelismConfigTest, SpHandlerIsHonouredOrRefused)
{
    world(2);
    AcceleratorConfig c = parse_accelerator_config(
        "{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_seq_length\": 64, \"sp_seq_length_is_variable\": false}}}");
    EXPECT_EQ(c.parallelism.fixed_sequence_length(), 64);
    c = parse_accelerator_config("{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_seq_length\": 64}}}");
    EXPECT_EQ(c.parallelism.fixed_sequence_length(), 0); // variable by default: any length
    EXPECT_REFUSED("{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_seq_length_is_variable\": false}}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "sp_seq_length must be given");
    EXPECT_REFUSED("{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_attn_implementation\": \"eager\"}}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "sp_handler.sp_attn_implementation: \"eager\" is not supported");
    EXPECT_REFUSED("{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_attn_implementation\": "
                   "\"flash_attention_2\"}}}",
                   ACCEL_ERR_UNIMPLEMENTED, "\"flash_attention_2\" is not built");
    EXPECT_REFUSED("{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_attn_implementation\": \"fast\"}}}",
                   ACCEL_ERR_INVALID_ARGUMENT, "expected \"sdpa\"");
    parse_accelerator_config("{\"parallelism_config\": {\"sp_size\": 2, \"sp_handler\": {\"sp_attn_implementation\": \"sdpa\"}}}");
    // The environment the launcher's --parallelism_config_sp_* flags export.
    setenv("ACCELERATE_USE_PARALLELISM_CONFIG", "true", 1);
    setenv("PARALLELISM_CONFIG_SP_SIZE", "2", 1);
    setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "32", 1);
    setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "False", 1);
    EXPECT_EQ(parse_accelerator_config("{}").parallelism.fixed_sequence_length(), 32);
    setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "None", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "sp_seq_length must be given");
    setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "true", 1);
    setenv("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "flex_attention", 1);
    EXPECT_REFUSED("{}", ACCEL_ERR_INVALID_ARGUMENT, "PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION: \"flex_attention\"");
}

// Pipeline stages sharded by the engine (pp x fsdp_plugin / deepspeed_plugin over dp_shard_size), also with tp_size,
// cp_size or sp_size; not yet with the plugins' partitioned builds.
TEST_F(ParallelismConfigTest, PipelineStagesShardedByThePlugins)
{
    world(4);
    auto c = parse_accelerator_config("{\"fsdp_plugin\": {\"sharding_strategy\": \"FULL_SHARD\"}, \"parallelism_config\": "
                                      "{\"pp_size\": 2, \"dp_shard_size\": 2, \"pp_schedule\": \"1f1b\"}}");
    EXPECT_EQ(c.parallelism.pp_size, 2);
    EXPECT_EQ(c.parallelism.dp_shard_size, 2);
    EXPECT_TRUE(c.sharding.enabled());
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 3}, \"parallelism_config\": "
                                 "{\"pp_size\": 2, \"dp_shard_size\": 2}}");
    EXPECT_EQ(c.sharding.zero_stage, 3);
    // Every dimension at once (tests/unit/parallel/pipeline_mesh_test.cpp trains them).
    world(16);
    c = parse_accelerator_config("{\"fsdp_plugin\": {}, \"parallelism_config\": {\"pp_size\": 2, \"tp_size\": 2, "
                                 "\"dp_replicate_size\": 2, \"dp_shard_size\": 2}}");
    EXPECT_EQ(c.parallelism.tp_size, 2);
    EXPECT_EQ(c.parallelism.dp_replicate_size, 2);
    world(8);
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 3}, \"parallelism_config\": {\"pp_size\": 2, "
                                 "\"cp_size\": 2, \"dp_shard_size\": 2}}");
    EXPECT_EQ(c.parallelism.cp_size, 2);
    c = parse_accelerator_config("{\"fsdp_plugin\": {}, \"parallelism_config\": {\"pp_size\": 2, \"sp_size\": 2, "
                                 "\"tp_size\": 2}}");
    EXPECT_EQ(c.parallelism.sp_size, 2);
    world(4);
    EXPECT_REFUSED("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"zero3_init_flag\": true}, \"parallelism_config\": "
                   "{\"pp_size\": 2, \"dp_shard_size\": 2}}",
                   ACCEL_ERR_UNIMPLEMENTED, "deepspeed_plugin.zero3_init_flag: with pipeline parallelism");
    // dp_shard_size still needs a plugin, pipeline or not.
    EXPECT_REFUSED("{\"parallelism_config\": {\"pp_size\": 2, \"dp_shard_size\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                   "parallelism_config.dp_shard_size: 2 shards the model, which needs fsdp_plugin or deepspeed_plugin");
}
