// config/accelerator_config: defaults, environment precedence, strictness, default-only sections, to_json.
#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/dynamo.hpp"

#include <torch/cuda.h>
#include <cjson/cJSON.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <unistd.h>
#include <functional>
#include <map>
#include <optional>
#include <string>

using accel::Error;
using accel::config::AcceleratorConfig;
using accel::config::check_dynamo_backend;
using accel::config::parse_accelerator_config;
using accel::config::to_json;

namespace {

// Every variable the parser may read (launcher topology, ACCELERATE_* / ACCEL_* defaults): each test starts
// with all of them unset, and the originals come back after it.
bool parser_reads(const std::string &name)
{
    for (const char *exact : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
        if (name == exact) return true;
    for (const char *prefix : {"ACCELERATE_", "ACCEL_", "OMPI_", "PMI_", "MPI_", "MV2_", "SLURM_"})
        if (name.rfind(prefix, 0) == 0) return true;
    return false;
}

class AcceleratorConfigTest : public ::testing::Test {
protected:
    void SetUp() override
    {
        for (char **e = environ; *e != nullptr; ++e) {
            std::string entry(*e);
            size_t eq = entry.find('=');
            if (eq == std::string::npos) continue;
            std::string name = entry.substr(0, eq);
            if (parser_reads(name)) saved_[name] = entry.substr(eq + 1);
        }
        for (const auto &kv : saved_) unsetenv(kv.first.c_str());
    }
    void TearDown() override
    {
        std::vector<std::string> now;
        for (char **e = environ; *e != nullptr; ++e) {
            std::string entry(*e);
            size_t eq = entry.find('=');
            if (eq != std::string::npos && parser_reads(entry.substr(0, eq))) now.push_back(entry.substr(0, eq));
        }
        for (const auto &name : now) unsetenv(name.c_str());
        for (const auto &kv : saved_) setenv(kv.first.c_str(), kv.second.c_str(), 1);
    }
    static void set(const char *name, const char *value) { setenv(name, value, 1); }

private:
    std::map<std::string, std::string> saved_;
};

Error parse_error(const char *json)
{
    try {
        parse_accelerator_config(json);
    } catch (const Error &e) {
        return e;
    }
    ADD_FAILURE() << "expected an accel::Error for " << (json ? json : "NULL");
    return Error(ACCEL_OK, "");
}

#define EXPECT_PARSE_ERROR(json, code_, msg_)                                                                          \
    do {                                                                                                               \
        Error e_ = parse_error(json);                                                                                  \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_EQ(std::string(e_.what()), std::string(msg_));                                                          \
    } while (0)

#define EXPECT_PARSE_ERROR_STARTS(json, code_, prefix_)                                                                \
    do {                                                                                                               \
        Error e_ = parse_error(json);                                                                                  \
        EXPECT_EQ(e_.code(), code_) << e_.what();                                                                      \
        EXPECT_EQ(std::string(e_.what()).rfind(prefix_, 0), 0u) << e_.what();                                          \
    } while (0)

// to_json text without its "process" section (environment facts the parser does not accept back) and,
// when asked, without "gradient_accumulation_steps" (which may not be combined with the plugin section).
std::string reparseable(const std::string &json, bool drop_steps)
{
    cJSON *root = cJSON_Parse(json.c_str());
    EXPECT_NE(root, nullptr);
    cJSON_DeleteItemFromObjectCaseSensitive(root, "process");
    if (drop_steps) cJSON_DeleteItemFromObjectCaseSensitive(root, "gradient_accumulation_steps");
    char *text = cJSON_PrintUnformatted(root);
    std::string out(text);
    cJSON_free(text);
    cJSON_Delete(root);
    return out;
}

// The unformatted JSON text of `path` ("a.b") inside the JSON text `json`, or "<missing>".
std::string section(const std::string &json, const std::string &path)
{
    cJSON *root = cJSON_Parse(json.c_str());
    const cJSON *node = root;
    size_t begin = 0;
    while (node != nullptr && begin <= path.size()) {
        size_t dot = path.find('.', begin);
        std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
        node = cJSON_GetObjectItemCaseSensitive(node, key.c_str());
        if (dot == std::string::npos) break;
        begin = dot + 1;
    }
    std::string out = "<missing>";
    if (node != nullptr) {
        char *text = cJSON_PrintUnformatted(node);
        out = text;
        cJSON_free(text);
    }
    cJSON_Delete(root);
    return out;
}

} // namespace

TEST_F(AcceleratorConfigTest, DefaultsFromNullAndEmptyObject)
{
    for (const char *json : {static_cast<const char *>(nullptr), "{}"}) {
        AcceleratorConfig c = parse_accelerator_config(json);
        EXPECT_TRUE(c.device_placement);
        EXPECT_FALSE(c.cpu);
        EXPECT_EQ(c.mixed_precision, ACCEL_MIXED_PRECISION_NO);
        EXPECT_EQ(c.gradient_accumulation.num_steps, 1);
        EXPECT_TRUE(c.gradient_accumulation.adjust_scheduler);
        EXPECT_TRUE(c.gradient_accumulation.sync_with_dataloader);
        EXPECT_FALSE(c.gradient_accumulation.sync_each_batch);
        EXPECT_FALSE(c.dataloader.split_batches);
        EXPECT_FALSE(c.dataloader.dispatch_batches.has_value());
        EXPECT_TRUE(c.dataloader.even_batches);
        EXPECT_FALSE(c.dataloader.use_seedable_sampler);
        EXPECT_FALSE(c.dataloader.data_seed.has_value());
        EXPECT_FALSE(c.dataloader.non_blocking);
        EXPECT_FALSE(c.dataloader.use_stateful_dataloader);
        EXPECT_EQ(c.rng_types, std::vector<std::string>{"generator"});
        EXPECT_TRUE(c.step_scheduler_with_optimizer);
        EXPECT_TRUE(c.autocast.enabled);
        EXPECT_TRUE(c.autocast.cache_enabled);
        EXPECT_EQ(c.topology.rank, 0);
        EXPECT_EQ(c.topology.world_size, 1);
        EXPECT_EQ(c.topology.local_rank, 0);
        EXPECT_EQ(c.topology.local_world_size, 1);
        EXPECT_TRUE(c.malloc_tuning);
    }
}

TEST_F(AcceleratorConfigTest, DefaultsToJson)
{
    const std::string j = to_json(parse_accelerator_config(nullptr));
    EXPECT_EQ(j.rfind("{\"device_placement\":true,\"cpu\":false,\"split_batches\":false,\"mixed_precision\":\"no\","
                      "\"gradient_accumulation_steps\":1,", 0),
              0u)
        << j;
    EXPECT_EQ(section(j, "gradient_accumulation_plugin"),
              "{\"num_steps\":1,\"adjust_scheduler\":true,\"sync_with_dataloader\":true,\"sync_each_batch\":false}");
    EXPECT_EQ(section(j, "dataloader_config"),
              "{\"split_batches\":false,\"even_batches\":true,\"use_seedable_sampler\":false,\"non_blocking\":false,"
              "\"use_stateful_dataloader\":false,\"dispatch_batches\":null,\"data_seed\":null}");
    EXPECT_EQ(section(j, "rng_types"), "[\"generator\"]");
    EXPECT_EQ(section(j, "step_scheduler_with_optimizer"), "true");
    EXPECT_EQ(section(j, "kwargs_handlers.autocast"), "{\"enabled\":true,\"cache_enabled\":true}");
    EXPECT_EQ(section(j, "kwargs_handlers.grad_scaler"),
              "{\"init_scale\":65536,\"growth_factor\":2,\"backoff_factor\":0.5,\"growth_interval\":2000,"
              "\"enabled\":true}");
    EXPECT_EQ(section(j, "deepspeed_plugin"), "null");
    EXPECT_EQ(section(j, "fsdp_plugin"), "null");
    EXPECT_EQ(section(j, "process.rank"), "0");
    EXPECT_EQ(section(j, "process.world_size"), "1");
    EXPECT_EQ(section(j, "process.local_rank"), "0");
    EXPECT_EQ(section(j, "process.local_world_size"), "1");
}

TEST_F(AcceleratorConfigTest, ReadsEveryField)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"device_placement\": false, \"cpu\": true, \"mixed_precision\": \"bf16\","
        " \"gradient_accumulation_plugin\": {\"num_steps\": 4, \"adjust_scheduler\": false,"
        " \"sync_with_dataloader\": false, \"sync_each_batch\": true},"
        " \"dataloader_config\": {\"split_batches\": true, \"dispatch_batches\": false, \"even_batches\": false,"
        " \"use_seedable_sampler\": true, \"data_seed\": 1234, \"non_blocking\": true},"
        " \"rng_types\": [\"torch\", \"generator\"], \"step_scheduler_with_optimizer\": false,"
        " \"kwargs_handlers\": {\"autocast\": {\"enabled\": false, \"cache_enabled\": false}},"
        " \"dynamo_backend\": \"no\", \"log_with\": []}");
    EXPECT_FALSE(c.device_placement);
    EXPECT_TRUE(c.cpu);
    EXPECT_EQ(c.mixed_precision, ACCEL_MIXED_PRECISION_BF16);
    EXPECT_EQ(c.gradient_accumulation.num_steps, 4);
    EXPECT_FALSE(c.gradient_accumulation.adjust_scheduler);
    EXPECT_FALSE(c.gradient_accumulation.sync_with_dataloader);
    EXPECT_TRUE(c.gradient_accumulation.sync_each_batch);
    EXPECT_TRUE(c.dataloader.split_batches);
    ASSERT_TRUE(c.dataloader.dispatch_batches.has_value());
    EXPECT_FALSE(*c.dataloader.dispatch_batches);
    EXPECT_FALSE(c.dataloader.even_batches);
    EXPECT_TRUE(c.dataloader.use_seedable_sampler);
    ASSERT_TRUE(c.dataloader.data_seed.has_value());
    EXPECT_EQ(*c.dataloader.data_seed, 1234u);
    EXPECT_TRUE(c.dataloader.non_blocking);
    EXPECT_EQ(c.rng_types, (std::vector<std::string>{"torch", "generator"}));
    EXPECT_FALSE(c.step_scheduler_with_optimizer);
    EXPECT_FALSE(c.autocast.enabled);
    EXPECT_FALSE(c.autocast.cache_enabled);
}

TEST_F(AcceleratorConfigTest, SplitBatchesTopLevelAndInDataloaderConfig)
{
    EXPECT_TRUE(parse_accelerator_config("{\"split_batches\": true}").dataloader.split_batches);
    // The dataloader_config value wins when given; absent, the top-level argument is kept.
    EXPECT_FALSE(
        parse_accelerator_config("{\"split_batches\": true, \"dataloader_config\": {\"split_batches\": false}}")
            .dataloader.split_batches);
    EXPECT_TRUE(parse_accelerator_config("{\"split_batches\": true, \"dataloader_config\": {\"even_batches\": true}}")
                    .dataloader.split_batches);
}

TEST_F(AcceleratorConfigTest, GradientAccumulationSteps)
{
    EXPECT_EQ(parse_accelerator_config("{\"gradient_accumulation_steps\": 8}").gradient_accumulation.num_steps, 8);
    EXPECT_PARSE_ERROR("{\"gradient_accumulation_steps\": 0}", ACCEL_ERR_INVALID_ARGUMENT,
                       "gradient_accumulation_steps: expected an integer in 1..2147483647, got 0");
    EXPECT_PARSE_ERROR("{\"gradient_accumulation_steps\": \"4\"}", ACCEL_ERR_INVALID_ARGUMENT,
                       "gradient_accumulation_steps: expected an integer in 1..2147483647, got \"4\"");
    EXPECT_PARSE_ERROR("{\"gradient_accumulation_plugin\": {\"num_steps\": 2.5}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "gradient_accumulation_plugin.num_steps: expected an integer in 1..2147483647, got 2.5");
    // Both the argument (!= 1) and the plugin: an error, as in Accelerator.__init__.
    EXPECT_PARSE_ERROR("{\"gradient_accumulation_steps\": 2, \"gradient_accumulation_plugin\": {\"num_steps\": 2}}",
                       ACCEL_ERR_INVALID_ARGUMENT,
                       "gradient_accumulation_plugin: give either gradient_accumulation_steps or "
                       "gradient_accumulation_plugin, not both");
    // gradient_accumulation_steps == 1 next to a plugin is accepted.
    EXPECT_EQ(parse_accelerator_config(
                  "{\"gradient_accumulation_steps\": 1, \"gradient_accumulation_plugin\": {\"num_steps\": 3}}")
                  .gradient_accumulation.num_steps,
              3);
}

// ---- environment ----------------------------------------------------------------------------------

TEST_F(AcceleratorConfigTest, EnvMixedPrecisionIsDefaultJsonWins)
{
    set("ACCELERATE_MIXED_PRECISION", "bf16");
    EXPECT_EQ(parse_accelerator_config(nullptr).mixed_precision, ACCEL_MIXED_PRECISION_BF16);
    EXPECT_EQ(parse_accelerator_config("{}").mixed_precision, ACCEL_MIXED_PRECISION_BF16);
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"no\"}").mixed_precision, ACCEL_MIXED_PRECISION_NO);
    set("ACCELERATE_MIXED_PRECISION", "no");
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"bf16\"}").mixed_precision, ACCEL_MIXED_PRECISION_BF16);
}

TEST_F(AcceleratorConfigTest, EnvMixedPrecisionValues)
{
    set("ACCELERATE_MIXED_PRECISION", "fp16");
    EXPECT_EQ(parse_accelerator_config(nullptr).mixed_precision, ACCEL_MIXED_PRECISION_FP16);
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"no\"}").mixed_precision, ACCEL_MIXED_PRECISION_NO);
    set("ACCELERATE_MIXED_PRECISION", "fp64");
    EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT,
                       "mixed_precision: expected one of \"no\", \"fp16\", \"bf16\", \"fp8\", got \"fp64\"");
    // A JSON value replaces the invalid environment value.
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"bf16\"}").mixed_precision, ACCEL_MIXED_PRECISION_BF16);
}

TEST_F(AcceleratorConfigTest, MixedPrecisionValues)
{
    // fp16 and fp8 parse everywhere; whether the device can run them is checked by the Accelerator.
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"no\"}").mixed_precision, ACCEL_MIXED_PRECISION_NO);
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"bf16\"}").mixed_precision, ACCEL_MIXED_PRECISION_BF16);
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"fp16\"}").mixed_precision, ACCEL_MIXED_PRECISION_FP16);
    EXPECT_EQ(parse_accelerator_config("{\"mixed_precision\": \"fp8\"}").mixed_precision, ACCEL_MIXED_PRECISION_FP8);
    EXPECT_PARSE_ERROR("{\"mixed_precision\": \"BF16\"}", ACCEL_ERR_INVALID_ARGUMENT,
                       "mixed_precision: expected one of \"no\", \"fp16\", \"bf16\", \"fp8\", got \"BF16\"");
    EXPECT_PARSE_ERROR("{\"mixed_precision\": true}", ACCEL_ERR_INVALID_ARGUMENT,
                       "mixed_precision: expected a string, got true");
}

TEST_F(AcceleratorConfigTest, EnvGradientAccumulationStepsIsDefaultJsonWins)
{
    set("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4");
    EXPECT_EQ(parse_accelerator_config(nullptr).gradient_accumulation.num_steps, 4);
    EXPECT_EQ(parse_accelerator_config("{\"gradient_accumulation_steps\": 2}").gradient_accumulation.num_steps, 2);
    EXPECT_EQ(parse_accelerator_config("{\"gradient_accumulation_plugin\": {\"num_steps\": 3}}")
                  .gradient_accumulation.num_steps,
              3);
    // The environment value is not a JSON argument: a plugin may come with it.
    EXPECT_NO_THROW(parse_accelerator_config("{\"gradient_accumulation_plugin\": {\"num_steps\": 2}}"));
}

TEST_F(AcceleratorConfigTest, EnvGradientAccumulationStepsErrors)
{
    for (const char *bad : {"0", "-2", "abc", "3x", "1.5"}) {
        set("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", bad);
        EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT,
                           std::string("environment variable ACCELERATE_GRADIENT_ACCUMULATION_STEPS: expected an "
                                       "integer >= 1, got \"") + bad + "\"");
    }
    // An empty variable counts as unset.
    set("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "");
    EXPECT_EQ(parse_accelerator_config(nullptr).gradient_accumulation.num_steps, 1);
}

TEST_F(AcceleratorConfigTest, EnvUseCpuAndMallocTuning)
{
    set("ACCELERATE_USE_CPU", "true");
    EXPECT_TRUE(parse_accelerator_config(nullptr).cpu);
    EXPECT_FALSE(parse_accelerator_config("{\"cpu\": false}").cpu);
    // Accelerate's str_to_bool words, any case (as its launcher and the config file are read).
    for (const char *yes : {"On", "y", "T", "YES", "1"}) {
        set("ACCELERATE_USE_CPU", yes);
        EXPECT_TRUE(parse_accelerator_config(nullptr).cpu) << yes;
    }
    for (const char *no : {"off", "N", "False", "0"}) {
        set("ACCELERATE_USE_CPU", no);
        EXPECT_FALSE(parse_accelerator_config(nullptr).cpu) << no;
    }
    set("ACCELERATE_USE_CPU", "maybe");
    EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT,
                       "environment variable ACCELERATE_USE_CPU: expected true or false, got \"maybe\"");
    unsetenv("ACCELERATE_USE_CPU");
    set("ACCEL_MALLOC_TUNING", "0");
    EXPECT_FALSE(parse_accelerator_config(nullptr).malloc_tuning);
}

// The parser only records the topology; whether a multi-process run can start is decided when the
// communicator is created (src/distributed), not here.
TEST_F(AcceleratorConfigTest, WorldSizeTwoIsReadFromTheLauncher)
{
    set("WORLD_SIZE", "2");
    set("RANK", "1");
    set("LOCAL_RANK", "1");
    AcceleratorConfig c = parse_accelerator_config(nullptr);
    EXPECT_EQ(c.topology.world_size, 2);
    EXPECT_EQ(c.topology.rank, 1);
    EXPECT_EQ(c.topology.local_rank, 1);
    EXPECT_EQ(c.topology.local_world_size, 2);
    EXPECT_EQ(c.topology.launcher, "torchrun");
    std::string j = to_json(c);
    EXPECT_EQ(section(j, "process.world_size"), "2");
    EXPECT_EQ(section(j, "process.rank"), "1");
}

// fuzz.launch_env's finding: LOCAL_RANK 2147483647 overflowed local_rank + 1 (the local size it implies).
TEST_F(AcceleratorConfigTest, LocalRankBeyondTheWorldIsRefused)
{
    set("WORLD_SIZE", "2");
    set("RANK", "0");
    set("LOCAL_RANK", "2147483647");
    EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT, "environment: LOCAL_RANK 2147483647 is not below WORLD_SIZE 2");
}

TEST_F(AcceleratorConfigTest, TopologyFromEnv)
{
    set("WORLD_SIZE", "1");
    set("RANK", "0");
    set("LOCAL_RANK", "0");
    AcceleratorConfig c = parse_accelerator_config(nullptr);
    EXPECT_EQ(c.topology.world_size, 1);
    EXPECT_EQ(c.topology.local_world_size, 1);
    set("RANK", "1");
    EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT, "environment: RANK 1 is not below WORLD_SIZE 1");
    set("RANK", "x");
    EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT,
                       "environment variable RANK: expected a non-negative integer, got \"x\"");
    unsetenv("RANK");
    set("WORLD_SIZE", "0");
    EXPECT_PARSE_ERROR(nullptr, ACCEL_ERR_INVALID_ARGUMENT, "environment: WORLD_SIZE must be >= 1");
}

// ---- strictness -----------------------------------------------------------------------------------

TEST_F(AcceleratorConfigTest, MalformedJson)
{
    EXPECT_PARSE_ERROR("{\"cpu\": tru}", ACCEL_ERR_INVALID_ARGUMENT,
                       "config_json: malformed JSON at byte 8 near 'tru}'");
    EXPECT_PARSE_ERROR("[]", ACCEL_ERR_INVALID_ARGUMENT, "(root): expected a JSON object, got []");
}

TEST_F(AcceleratorConfigTest, UnknownKeys)
{
    EXPECT_PARSE_ERROR_STARTS("{\"gradient_acumulation_steps\": 2}", ACCEL_ERR_INVALID_ARGUMENT,
                              "gradient_acumulation_steps: unknown key (known keys: ");
    EXPECT_PARSE_ERROR("{\"gradient_accumulation_plugin\": {\"steps\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "gradient_accumulation_plugin.steps: unknown key (known keys: adjust_scheduler, num_steps, "
                       "sync_each_batch, sync_with_dataloader)");
    EXPECT_PARSE_ERROR_STARTS("{\"dataloader_config\": {\"even_batch\": true}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "dataloader_config.even_batch: unknown key");
    EXPECT_PARSE_ERROR("{\"kwargs_handlers\": {\"autocast\": {\"dtype\": \"bf16\"}}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "kwargs_handlers.autocast.dtype: unknown key (known keys: cache_enabled, enabled)");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"bogus\": {}}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "kwargs_handlers.bogus: unknown key");
}

TEST_F(AcceleratorConfigTest, DuplicateKeys)
{
    EXPECT_PARSE_ERROR("{\"cpu\": true, \"cpu\": false}", ACCEL_ERR_INVALID_ARGUMENT, "cpu: duplicate key");
    EXPECT_PARSE_ERROR("{\"dataloader_config\": {\"even_batches\": true, \"even_batches\": true}}",
                       ACCEL_ERR_INVALID_ARGUMENT, "dataloader_config.even_batches: duplicate key");
}

TEST_F(AcceleratorConfigTest, WrongTypesNamePath)
{
    EXPECT_PARSE_ERROR("{\"cpu\": 1}", ACCEL_ERR_INVALID_ARGUMENT, "cpu: expected true or false, got 1");
    EXPECT_PARSE_ERROR("{\"dataloader_config\": {\"even_batches\": \"yes\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "dataloader_config.even_batches: expected true or false, got \"yes\"");
    EXPECT_PARSE_ERROR("{\"dataloader_config\": {\"data_seed\": -1}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "dataloader_config.data_seed: expected an integer >= 0, got -1");
    EXPECT_PARSE_ERROR("{\"dataloader_config\": []}", ACCEL_ERR_INVALID_ARGUMENT,
                       "dataloader_config: expected a JSON object, got []");
    EXPECT_PARSE_ERROR("{\"rng_types\": \"torch\"}", ACCEL_ERR_INVALID_ARGUMENT,
                       "rng_types: expected an array of strings, got \"torch\"");
    EXPECT_PARSE_ERROR("{\"rng_types\": [\"torch\", 3]}", ACCEL_ERR_INVALID_ARGUMENT,
                       "rng_types[1]: expected a string, got 3");
    EXPECT_PARSE_ERROR("{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": \"25MB\"}}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "kwargs_handlers.ddp.bucket_cap_mb: expected an integer in 1..1048576, got \"25MB\"");
    EXPECT_PARSE_ERROR("{\"kwargs_handlers\": {\"grad_scaler\": {\"backoff_factor\": 1.5}}}",
                       ACCEL_ERR_INVALID_ARGUMENT,
                       "kwargs_handlers.grad_scaler.backoff_factor: expected a number > 0 and < 1, got 1.5");
}

TEST_F(AcceleratorConfigTest, RngTypes)
{
    EXPECT_TRUE(parse_accelerator_config("{\"rng_types\": []}").rng_types.empty());
    if (torch::cuda::is_available())
        EXPECT_EQ(parse_accelerator_config("{\"rng_types\": [\"generator\", \"cuda\"]}").rng_types.size(), 2u);
    else
        EXPECT_PARSE_ERROR("{\"rng_types\": [\"generator\", \"cuda\"]}", ACCEL_ERR_UNIMPLEMENTED,
                           "rng_types[1]: the \"cuda\" generator needs a GPU, and this LibTorch sees none");
    EXPECT_PARSE_ERROR("{\"rng_types\": [\"xla\"]}", ACCEL_ERR_UNIMPLEMENTED,
                       "rng_types[0]: the \"xla\" generator does not exist in this build");
    EXPECT_PARSE_ERROR_STARTS("{\"rng_types\": [\"dice\"]}", ACCEL_ERR_INVALID_ARGUMENT,
                              "rng_types[0]: expected one of \"torch\", \"generator\"");
}

// ---- default-only and unsupported sections ---------------------------------------------------------

TEST_F(AcceleratorConfigTest, DdpKwargsDefaultsAccepted)
{
    AcceleratorConfig empty = parse_accelerator_config("{\"kwargs_handlers\": {\"ddp\": {}}}");
    AcceleratorConfig c = parse_accelerator_config(
        "{\"kwargs_handlers\": {\"ddp\": {\"dim\": 0, \"broadcast_buffers\": true, \"bucket_cap_mb\": 25,"
        " \"find_unused_parameters\": false, \"check_reduction\": false, \"gradient_as_bucket_view\": false,"
        " \"static_graph\": false, \"comm_hook\": \"no\", \"comm_wrapper\": \"no\", \"comm_state_option\": {}}}}");
    for (const AcceleratorConfig *x : {&empty, &c}) {
        EXPECT_EQ(x->ddp.dim, 0);
        EXPECT_TRUE(x->ddp.broadcast_buffers);
        EXPECT_EQ(x->ddp.bucket_cap_mb, 25);
        EXPECT_FALSE(x->ddp.find_unused_parameters);
        EXPECT_FALSE(x->ddp.gradient_as_bucket_view);
        EXPECT_FALSE(x->ddp.static_graph);
        EXPECT_EQ(x->ddp.comm_hook, "no");
    }
    EXPECT_EQ(to_json(empty), to_json(parse_accelerator_config(nullptr)));
}

TEST_F(AcceleratorConfigTest, DdpKwargsSupportedValues)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"kwargs_handlers\": {\"ddp\": {\"bucket_cap_mb\": 50, \"find_unused_parameters\": true,"
        " \"broadcast_buffers\": false, \"gradient_as_bucket_view\": true, \"comm_hook\": \"bf16\"}}}");
    EXPECT_EQ(c.ddp.bucket_cap_mb, 50);
    EXPECT_TRUE(c.ddp.find_unused_parameters);
    EXPECT_FALSE(c.ddp.broadcast_buffers);
    EXPECT_TRUE(c.ddp.gradient_as_bucket_view);
    EXPECT_EQ(c.ddp.comm_hook, "bf16");
}

TEST_F(AcceleratorConfigTest, DdpKwargsUnsupportedValuesAreUnimplementedNamingPath)
{
    EXPECT_PARSE_ERROR("{\"kwargs_handlers\": {\"ddp\": {\"comm_hook\": \"power_sgd\"}}}", ACCEL_ERR_UNIMPLEMENTED,
                       "kwargs_handlers.ddp.comm_hook: the PowerSGD communication hooks are not yet supported by "
                       "accel; use \"no\", \"fp16\" or \"bf16\"");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"ddp\": {\"comm_hook\": \"batched_power_sgd\"}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.ddp.comm_hook: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"ddp\": {\"comm_wrapper\": \"fp16\"}}}", ACCEL_ERR_UNIMPLEMENTED,
                              "kwargs_handlers.ddp.comm_wrapper: ");
    EXPECT_PARSE_ERROR("{\"kwargs_handlers\": {\"ddp\": {\"comm_hook\": \"fp32\"}}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "kwargs_handlers.ddp.comm_hook: expected one of \"no\", \"fp16\", \"bf16\", \"power_sgd\", "
                       "\"batched_power_sgd\", got \"fp32\"");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"ddp\": {\"static_graph\": true, \"nope\": 1}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.ddp.nope: unknown key");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"ddp\": {\"comm_state_option\": {\"rank\": 4}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.ddp.comm_state_option.rank: unknown key");
}

TEST_F(AcceleratorConfigTest, GradScalerKwargs)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"kwargs_handlers\": {\"grad_scaler\": {\"init_scale\": 1024, \"growth_factor\": 4, \"backoff_factor\": 0.25,"
        " \"growth_interval\": 10, \"enabled\": false}}}");
    EXPECT_EQ(c.grad_scaler.init_scale, 1024.0);
    EXPECT_EQ(c.grad_scaler.growth_factor, 4.0);
    EXPECT_EQ(c.grad_scaler.backoff_factor, 0.25);
    EXPECT_EQ(c.grad_scaler.growth_interval, 10);
    EXPECT_FALSE(c.grad_scaler.enabled);
    // PyTorch's GradScaler: growth_factor > 1, 0 < backoff_factor < 1.
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"grad_scaler\": {\"growth_factor\": 1}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.grad_scaler.growth_factor: expected a number > 1");
    EXPECT_PARSE_ERROR("{\"kwargs_handlers\": {\"grad_scaler\": {\"backoff_factor\": 1}}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "kwargs_handlers.grad_scaler.backoff_factor: expected a number > 0 and < 1, got 1");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"grad_scaler\": {\"growth_interval\": 0}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.grad_scaler.growth_interval: expected an integer");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"grad_scaler\": {\"scale\": 2}}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "kwargs_handlers.grad_scaler.scale: unknown key");
}

TEST_F(AcceleratorConfigTest, InitProcessGroupKwargs)
{
    AcceleratorConfig c =
        parse_accelerator_config("{\"kwargs_handlers\": {\"init_process_group\": {\"backend\": \"gloo\","
                                 " \"init_method\": \"tcp://127.0.0.1:29500\", \"timeout\": 60}}}");
    EXPECT_EQ(c.init_process_group.backend, "gloo");
    EXPECT_EQ(c.init_process_group.init_method, "tcp://127.0.0.1:29500");
    EXPECT_EQ(c.init_process_group.timeout, 60.0);
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"init_process_group\": {\"backend\": \"ccl\"}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"init_process_group\": {\"backend\": \"smoke\"}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.backend: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"init_process_group\": {\"init_method\": \"http://x\"}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.init_method: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"init_process_group\": {\"timeout\": 0}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.timeout: ");
}

TEST_F(AcceleratorConfigTest, Fp8RecipeKwargs)
{
    EXPECT_NO_THROW(parse_accelerator_config("{\"kwargs_handlers\": {\"fp8_recipe\": {}}}"));
    AcceleratorConfig c = parse_accelerator_config(
        "{\"mixed_precision\": \"fp8\", \"kwargs_handlers\": {\"fp8_recipe\": {\"fp8_format\": \"e4m3\","
        " \"margin\": 2, \"amax_history_len\": 16, \"amax_compute_algo\": \"max\"}}}");
    EXPECT_EQ(c.fp8_recipe.fp8_format, "E4M3");
    EXPECT_EQ(c.fp8_recipe.margin, 2);
    EXPECT_EQ(c.fp8_recipe.amax_history_len, 16);
    EXPECT_EQ(c.fp8_recipe.amax_compute_algo, "max");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"fp8_recipe\": {\"use_mxfp8_block_scaling\": true}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.fp8_recipe.use_mxfp8_block_scaling: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"fp8_recipe\": {\"backend\": \"msamp\"}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.fp8_recipe.backend: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"fp8_recipe\": {\"fp8_format\": \"E3M4\"}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.fp8_recipe.fp8_format: ");
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"fp8_recipe\": {\"override_linear_precision\": [true]}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.fp8_recipe.override_linear_precision: ");
}

// dynamo_backend / dynamo_plugin / ACCELERATE_DYNAMO_BACKEND (config/dynamo.hpp): "no", "eager" and "ofi" in any case,
// the backends that need torch.compile refused by name, unknown names invalid; JSON over the environment.
TEST_F(AcceleratorConfigTest, DynamoBackendsMappedHonestly)
{
    EXPECT_EQ(parse_accelerator_config(nullptr).dynamo_backend, "NO");
    EXPECT_EQ(parse_accelerator_config("{\"dynamo_backend\": \"no\"}").dynamo_backend, "NO");
    EXPECT_EQ(parse_accelerator_config("{\"dynamo_backend\": \"Eager\"}").dynamo_backend, "EAGER");
    auto p = parse_accelerator_config(
        "{\"dynamo_plugin\": {\"backend\": \"eager\", \"mode\": \"max-autotune\", \"fullgraph\": true, "
        "\"dynamic\": null, \"options\": {\"x\": 1}, \"disable\": false, \"use_regional_compilation\": true}}");
    EXPECT_EQ(p.dynamo_backend, "EAGER");
    EXPECT_NE(to_json(p).find("\"dynamo_backend\":\"eager\""), std::string::npos) << to_json(p);
    EXPECT_EQ(parse_accelerator_config("{\"dynamo_plugin\": {}}").dynamo_backend, "NO");
    EXPECT_PARSE_ERROR("{\"dynamo_backend\": \"inductor\"}", ACCEL_ERR_UNIMPLEMENTED,
                       "dynamo_backend: \"inductor\" compiles the model with torch.compile (TorchDynamo), which exists "
                       "only in Python PyTorch, not in LibTorch's C++ API; accel accepts \"no\" and \"eager\" (both run "
                       "the model as written) and \"ofi\" (TorchScript models' freeze + optimize_for_inference for "
                       "evaluation)");
    // "ofi": TorchScript's freeze + optimize_for_inference (Model::set_compile_backend), any case, reported lower-case.
    EXPECT_EQ(check_dynamo_backend("ofi", "k"), "OFI");
    EXPECT_EQ(check_dynamo_backend("OFI", "k"), "OFI");
    auto ofi = parse_accelerator_config("{\"dynamo_plugin\": {\"backend\": \"Ofi\"}}");
    EXPECT_EQ(ofi.dynamo_backend, "OFI");
    EXPECT_NE(to_json(ofi).find("\"dynamo_backend\":\"ofi\""), std::string::npos) << to_json(ofi);
    EXPECT_PARSE_ERROR_STARTS("{\"dynamo_plugin\": {\"backend\": \"CUDAGRAPHS\"}}", ACCEL_ERR_UNIMPLEMENTED,
                              "dynamo_plugin.backend: \"CUDAGRAPHS\" compiles the model with torch.compile");
    EXPECT_PARSE_ERROR_STARTS("{\"dynamo_backend\": \"turbo\"}", ACCEL_ERR_INVALID_ARGUMENT,
                              "dynamo_backend: expected one of Accelerate's dynamo backends");
    EXPECT_PARSE_ERROR_STARTS("{\"dynamo_plugin\": {\"mode\": \"fast\"}}", ACCEL_ERR_INVALID_ARGUMENT, "dynamo_plugin.mode");
    EXPECT_PARSE_ERROR_STARTS("{\"dynamo_plugin\": {\"backend\": \"no\", \"bogus\": 1}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "dynamo_plugin.bogus");
    EXPECT_PARSE_ERROR_STARTS("{\"dynamo_plugin\": {}, \"dynamo_backend\": \"no\"}", ACCEL_ERR_INVALID_ARGUMENT,
                              "dynamo_backend: give either dynamo_backend or dynamo_plugin");
    // The launcher's ACCELERATE_DYNAMO_BACKEND (accel launch --dynamo_backend, a config file's dynamo_config).
    set("ACCELERATE_DYNAMO_BACKEND", "EAGER");
    EXPECT_EQ(parse_accelerator_config(nullptr).dynamo_backend, "EAGER");
    EXPECT_EQ(parse_accelerator_config("{\"dynamo_backend\": \"no\"}").dynamo_backend, "NO");
    set("ACCELERATE_DYNAMO_BACKEND", "INDUCTOR");
    EXPECT_PARSE_ERROR_STARTS(nullptr, ACCEL_ERR_UNIMPLEMENTED, "ACCELERATE_DYNAMO_BACKEND: \"INDUCTOR\" compiles");
    EXPECT_EQ(parse_accelerator_config("{\"dynamo_plugin\": {\"backend\": \"no\"}}").dynamo_backend, "NO");
}

TEST_F(AcceleratorConfigTest, UnsupportedSectionsNamePath)
{
    // ProfileKwargs is built (profile_schedule_test.cpp, capi test_profile.c); what LibTorch 1.13 cannot record is
    // refused by name.
    EXPECT_PARSE_ERROR_STARTS("{\"kwargs_handlers\": {\"profile\": {\"with_modules\": true}}}", ACCEL_ERR_UNIMPLEMENTED,
                              "kwargs_handlers.profile.with_modules: module hierarchies");
    // MegatronLMPlugin's pipeline and clipping are mapped (megatron_lm_plugin_test.cpp); the keys of Megatron's own
    // training loop are not.
    EXPECT_PARSE_ERROR_STARTS("{\"megatron_lm_plugin\": {\"train_iters\": 10}}", ACCEL_ERR_UNIMPLEMENTED,
                              "megatron_lm_plugin.train_iters: ");
    // parallelism_config's data, tensor and context dimensions are built (parallelism_config_test.cpp): cp_size 2
    // is refused on one process for the process count only.
    EXPECT_PARSE_ERROR_STARTS("{\"parallelism_config\": {\"cp_size\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "parallelism_config: dp_replicate_size (1) x dp_shard_size (1) x tp_size (1) x cp_size (2)");
    EXPECT_PARSE_ERROR_STARTS("{\"log_with\": [\"wandb\"]}", ACCEL_ERR_UNIMPLEMENTED, "log_with: ");
    EXPECT_PARSE_ERROR_STARTS("{\"log_with\": \"tensorboard\"}", ACCEL_ERR_INVALID_ARGUMENT,
                              "log_with: \"tensorboard\" writes files under project_config.logging_dir");
    EXPECT_PARSE_ERROR_STARTS("{\"log_with\": [\"jsonl\", \"bogus\"], \"project_dir\": \"p\"}", ACCEL_ERR_INVALID_ARGUMENT,
                              "log_with[1]: expected one of");
    EXPECT_EQ(parse_accelerator_config("{\"log_with\": \"all\", \"project_dir\": \"p\"}").log_with,
              (std::vector<std::string>{"jsonl", "csv", "tensorboard"}));
    // Accepted: accel's loaders always save and restore their position (dl_state_dict.bin).
    EXPECT_TRUE(parse_accelerator_config("{\"dataloader_config\": {\"use_stateful_dataloader\": true}}")
                    .dataloader.use_stateful_dataloader);
    // Null means "not given" everywhere.
    EXPECT_NO_THROW(parse_accelerator_config("{\"deepspeed_plugin\": null, \"fsdp_plugin\": null, \"project_config\":"
                                             " null, \"dataloader_config\": {\"dispatch_batches\": null}}"));
}

TEST_F(AcceleratorConfigTest, ProjectConfiguration)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"project_config\": {\"project_dir\": \"runs/exp1\", \"automatic_checkpoint_naming\": true,"
        " \"total_limit\": 3}}");
    ASSERT_TRUE(c.project.project_dir.has_value());
    EXPECT_EQ(*c.project.project_dir, "runs/exp1");
    ASSERT_TRUE(c.project.logging_dir.has_value());
    EXPECT_EQ(*c.project.logging_dir, "runs/exp1"); // defaults to project_dir
    EXPECT_TRUE(c.project.automatic_checkpoint_naming);
    ASSERT_TRUE(c.project.total_limit.has_value());
    EXPECT_EQ(*c.project.total_limit, 3);
    EXPECT_EQ(*parse_accelerator_config("{\"project_dir\": \"top\"}").project.project_dir, "top");
    EXPECT_PARSE_ERROR("{\"project_config\": {\"automatic_checkpoint_naming\": true}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "project_config.automatic_checkpoint_naming: true needs project_config.project_dir (or "
                       "project_dir), which is not set");
    EXPECT_PARSE_ERROR("{\"project_config\": {\"project_dir\": \"\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                       "project_config.project_dir: expected a non-empty path, got \"\"");
    EXPECT_PARSE_ERROR_STARTS("{\"project_config\": {\"total_limit\": 0}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "project_config.total_limit: expected an integer");
}

// ---- to_json --------------------------------------------------------------------------------------

TEST_F(AcceleratorConfigTest, ToJsonReflectsParsedValues)
{
    std::string j = to_json(parse_accelerator_config(
        "{\"mixed_precision\": \"bf16\", \"gradient_accumulation_steps\": 4,"
        " \"dataloader_config\": {\"data_seed\": 7, \"dispatch_batches\": false}}"));
    EXPECT_NE(j.find("\"mixed_precision\":\"bf16\""), std::string::npos) << j;
    EXPECT_NE(j.find("\"gradient_accumulation_steps\":4"), std::string::npos) << j;
    EXPECT_NE(j.find("\"num_steps\":4"), std::string::npos) << j;
    EXPECT_NE(j.find("\"data_seed\":7"), std::string::npos) << j;
    EXPECT_NE(j.find("\"dispatch_batches\":false"), std::string::npos) << j;
}

TEST_F(AcceleratorConfigTest, DispatchBatches)
{
    AcceleratorConfig on = parse_accelerator_config("{\"dataloader_config\": {\"dispatch_batches\": true}}");
    ASSERT_TRUE(on.dataloader.dispatch_batches.has_value());
    EXPECT_TRUE(*on.dataloader.dispatch_batches);
    EXPECT_NE(to_json(on).find("\"dispatch_batches\":true"), std::string::npos);
    AcceleratorConfig null = parse_accelerator_config("{\"dataloader_config\": {\"dispatch_batches\": null}}");
    EXPECT_FALSE(null.dataloader.dispatch_batches.has_value());
    EXPECT_NE(to_json(null).find("\"dispatch_batches\":null"), std::string::npos);
    // Accelerate's prepare_data_loader: dispatching needs device placement.
    EXPECT_PARSE_ERROR("{\"device_placement\": false, \"dataloader_config\": {\"dispatch_batches\": true}}",
                       ACCEL_ERR_INVALID_ARGUMENT, "dataloader_config.dispatch_batches: true requires device_placement: true");
    EXPECT_NO_THROW(parse_accelerator_config("{\"device_placement\": false, \"dataloader_config\": {\"dispatch_batches\": false}}"));
    EXPECT_PARSE_ERROR_STARTS("{\"dataloader_config\": {\"dispatch_batches\": 1}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "dataloader_config.dispatch_batches: ");
}

TEST_F(AcceleratorConfigTest, ToJsonRoundTrip)
{
    const char *configs[] = {
        "{}",
        "{\"cpu\": true, \"device_placement\": false, \"mixed_precision\": \"bf16\"}",
        "{\"gradient_accumulation_plugin\": {\"num_steps\": 4, \"sync_with_dataloader\": false,"
        " \"adjust_scheduler\": false, \"sync_each_batch\": true}}",
        "{\"split_batches\": true, \"dataloader_config\": {\"even_batches\": false, \"use_seedable_sampler\": true,"
        " \"data_seed\": 99, \"non_blocking\": true, \"dispatch_batches\": true}, \"rng_types\": [\"torch\"],"
        " \"step_scheduler_with_optimizer\": false, \"kwargs_handlers\": {\"autocast\": {\"cache_enabled\": false}}}",
        // Offload settings survive (they were once written as "none").
        "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_optimizer_device\": \"nvme\", \"offload_optimizer_nvme_path\":"
        " \"/tmp/o\", \"offload_param_device\": \"nvme\", \"offload_param_nvme_path\": \"/tmp/p\"}}",
        "{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_optimizer_device\": \"cpu\", \"offload_param_device\": \"cpu\"}}",
        "{\"fsdp_plugin\": {\"cpu_offload\": true}}",
    };
    for (const char *json : configs) {
        SCOPED_TRACE(json);
        AcceleratorConfig first = parse_accelerator_config(json);
        std::string text = to_json(first);
        AcceleratorConfig second = parse_accelerator_config(reparseable(text, true).c_str());
        EXPECT_EQ(to_json(second), text);
        if (first.gradient_accumulation.num_steps == 1) {
            // With one step the whole effective config (less the process facts) parses back as is.
            EXPECT_EQ(to_json(parse_accelerator_config(reparseable(text, false).c_str())), text);
        }
    }
}

TEST_F(AcceleratorConfigTest, ToJsonProcessSection)
{
    set("WORLD_SIZE", "1");
    set("LOCAL_WORLD_SIZE", "1");
    std::string j = to_json(parse_accelerator_config(nullptr));
    EXPECT_EQ(section(j, "process.rank"), "0");
    EXPECT_EQ(section(j, "process.world_size"), "1");
    EXPECT_EQ(section(j, "process.local_rank"), "0");
    EXPECT_EQ(section(j, "process.local_world_size"), "1");
    EXPECT_EQ(section(j, "process.launcher"), "\"torchrun\"");
}

TEST(MixedPrecisionName, Values)
{
    EXPECT_STREQ(accel::config::mixed_precision_name(ACCEL_MIXED_PRECISION_NO), "no");
    EXPECT_STREQ(accel::config::mixed_precision_name(ACCEL_MIXED_PRECISION_FP16), "fp16");
    EXPECT_STREQ(accel::config::mixed_precision_name(ACCEL_MIXED_PRECISION_BF16), "bf16");
    EXPECT_STREQ(accel::config::mixed_precision_name(ACCEL_MIXED_PRECISION_FP8), "fp8");
}

// fsdp_plugin / deepspeed_plugin (sharding-and-parallelism.md §2-3): what each strategy shards, and every
// bad or not-yet-supported setting named by its key.
TEST_F(AcceleratorConfigTest, ShardingPlugins)
{
    auto c = parse_accelerator_config("{\"fsdp_plugin\": {}}");
    EXPECT_EQ(c.sharding.frontend, "fsdp");
    EXPECT_EQ(c.sharding.strategy, "FULL_SHARD"); // Accelerate's default
    EXPECT_TRUE(c.sharding.shard_parameters && c.sharding.reshard_after_forward && c.sharding.shard_gradients);
    EXPECT_FALSE(c.sharding.sync_module_states);
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"sharding_strategy\": 2, \"sync_module_states\": true}}");
    EXPECT_EQ(c.sharding.strategy, "SHARD_GRAD_OP");
    EXPECT_TRUE(c.sharding.shard_parameters && !c.sharding.reshard_after_forward && c.sharding.sync_module_states);
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"sharding_strategy\": \"no_shard\"}}");
    EXPECT_FALSE(c.sharding.shard_optimizer || c.sharding.shard_gradients || c.sharding.shard_parameters);
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"fsdp_version\": 2, \"reshard_after_forward\": false}}");
    EXPECT_EQ(c.sharding.strategy, "SHARD_GRAD_OP");
    EXPECT_EQ(c.sharding.state_dict_type, "SHARDED_STATE_DICT"); // Accelerate's default for FSDP2
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"state_dict_type\": \"sharded_state_dict\"}}");
    EXPECT_EQ(c.sharding.state_dict_type, "SHARDED_STATE_DICT");
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\", "
                                 "\"transformer_cls_names_to_wrap\": [\"transformer_encoder_layer\"]}}");
    EXPECT_EQ(c.sharding.auto_wrap_policy, "TRANSFORMER_BASED_WRAP");
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"auto_wrap_policy\": \"SIZE_BASED_WRAP\", \"min_num_params\": 0}}");
    EXPECT_EQ(c.sharding.auto_wrap_policy, "NO_WRAP"); // 0 disables the size policy
    for (int stage = 0; stage <= 3; ++stage) {
        c = parse_accelerator_config(("{\"deepspeed_plugin\": {\"zero_stage\": " + std::to_string(stage) + "}}").c_str());
        EXPECT_EQ(c.sharding.shard_optimizer, stage >= 1);
        EXPECT_EQ(c.sharding.shard_gradients, stage >= 2);
        EXPECT_EQ(c.sharding.shard_parameters, stage >= 3);
        EXPECT_TRUE(c.sharding.sync_module_states);
    }
    c = parse_accelerator_config("{\"deepspeed_plugin\": {}}");
    EXPECT_EQ(c.sharding.zero_stage, 2); // Accelerate's default
    c = parse_accelerator_config("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_accumulation_steps\": 4, "
                                 "\"gradient_clipping\": 1.5}}");
    EXPECT_EQ(c.gradient_accumulation.num_steps, 4); // DeepSpeed's value wins
    EXPECT_DOUBLE_EQ(c.sharding.gradient_clipping, 1.5);
    c = parse_accelerator_config("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"gradient_accumulation_steps\": \"auto\", "
                                 "\"gradient_clipping\": \"auto\"}}");
    EXPECT_EQ(c.gradient_accumulation.num_steps, 2);
    EXPECT_DOUBLE_EQ(c.sharding.gradient_clipping, 0.0);
    EXPECT_NE(to_json(c).find("\"zero_stage\":2"), std::string::npos);
    // Prefetching, activation checkpointing and 16-bit policies; the effective config parses back the same.
    c = parse_accelerator_config("{\"fsdp_plugin\": {\"forward_prefetch\": true, \"backward_prefetch\": 2, "
                                 "\"activation_checkpointing\": true, \"mixed_precision_policy\": {\"param_dtype\": "
                                 "\"bf16\", \"reduce_dtype\": \"float32\"}}}");
    EXPECT_TRUE(c.sharding.forward_prefetch && c.sharding.activation_checkpointing);
    EXPECT_EQ(c.sharding.backward_prefetch, "BACKWARD_POST");
    EXPECT_EQ(c.sharding.param_dtype, "bfloat16");
    EXPECT_EQ(c.sharding.reduce_dtype, "float32");
    EXPECT_EQ(c.sharding.buffer_dtype, "float32");
    const std::string json = to_json(c);
    for (const char *part : {"\"forward_prefetch\":true", "\"backward_prefetch\":\"BACKWARD_POST\"",
                             "\"activation_checkpointing\":true", "\"mixed_precision_policy\":{\"param_dtype\":\"bfloat16\","
                             "\"reduce_dtype\":\"float32\",\"buffer_dtype\":\"float32\"}"})
        EXPECT_NE(json.find(part), std::string::npos) << part << " in " << json;
    EXPECT_EQ(parse_accelerator_config("{\"fsdp_plugin\": {\"backward_prefetch\": null}}").sharding.backward_prefetch, "NO_PREFETCH");
    // mixed_precision "bf16": Accelerate's default policy (FSDP) and DeepSpeed's bf16 weights; "fp16" keeps float32.
    for (const char *plugin : {"\"fsdp_plugin\": {}", "\"deepspeed_plugin\": {}"}) {
        c = parse_accelerator_config((std::string("{\"mixed_precision\": \"bf16\", ") + plugin + "}").c_str());
        EXPECT_EQ(c.sharding.param_dtype, "bfloat16") << plugin;
        EXPECT_EQ(c.sharding.reduce_dtype, "bfloat16") << plugin;
    }
    c = parse_accelerator_config("{\"mixed_precision\": \"bf16\", \"fsdp_plugin\": {\"mixed_precision_policy\": {}}}");
    EXPECT_EQ(c.sharding.param_dtype, "float32"); // a policy given wins
    c = parse_accelerator_config("{\"fsdp_plugin\": {}}");
    EXPECT_EQ(c.sharding.param_dtype, "float32");

    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 5}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.zero_stage: ");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"sharding_strategy\": \"QUARTER_SHARD\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.sharding_strategy: expected one of");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"sharding_strategy\": \"HYBRID_SHARD\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.sharding_strategy: HYBRID_SHARD shards inside a node and replicates across "
                              "nodes, and this run has one node");
    EXPECT_EQ(parse_accelerator_config("{\"fsdp_plugin\": {\"cpu_offload\": true}}").sharding.offload_param_device, "cpu");
    EXPECT_EQ(parse_accelerator_config("{\"fsdp_plugin\": {}}").sharding.offload_param_device, "none");
    // Optimizer offload: "cpu", and "nvme" with its folder, for ZeRO stages 1-3.
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_optimizer_device\": \"nvme\", "
                                 "\"offload_optimizer_nvme_path\": \"/tmp/x\"}}");
    EXPECT_EQ(c.sharding.offload_optimizer_device, "nvme");
    EXPECT_EQ(c.sharding.offload_optimizer_nvme_path, "/tmp/x");
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 1, \"offload_optimizer_device\": \"cpu\"}}");
    EXPECT_EQ(c.sharding.offload_optimizer_device, "cpu");
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                                 "\"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp/y\", "
                                 "\"pin_memory\": true}}}}}");
    EXPECT_EQ(c.sharding.offload_optimizer_device, "nvme");
    EXPECT_EQ(c.sharding.offload_optimizer_nvme_path, "/tmp/y");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_optimizer_device\": \"nvme\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.offload_optimizer_nvme_path: the \"nvme\" "
                              "offload device needs the folder");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 0, \"offload_optimizer_device\": \"cpu\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.offload_optimizer_device: \"cpu\" offloads the "
                              "partitioned optimizer state of ZeRO stages 1-3");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"offload_optimizer_device\": \"cpu\", "
                              "\"offload_optimizer_nvme_path\": \"/tmp/x\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.offload_optimizer_nvme_path: a path is only used");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2, "
                              "\"offload_optimizer\": {\"device\": \"nvme\"}}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.offload_optimizer."
                              "nvme_path: the \"nvme\" offload device needs the folder");
    // Parameter offload: ZeRO-3 only; "nvme" with its folder.
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"nvme\", "
                                 "\"offload_param_nvme_path\": \"/tmp/p\"}}");
    EXPECT_EQ(c.sharding.offload_param_device, "nvme");
    EXPECT_EQ(c.sharding.offload_param_nvme_path, "/tmp/p");
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                                 "\"offload_param\": {\"device\": \"nvme\", \"nvme_path\": \"/tmp/q\"}}}}}");
    EXPECT_EQ(c.sharding.offload_param_device, "nvme");
    EXPECT_EQ(c.sharding.offload_param_nvme_path, "/tmp/q");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"nvme\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.offload_param_nvme_path: the \"nvme\" "
                              "offload device needs the folder to keep the parameter shards in");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 2, \"offload_param_device\": \"cpu\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.offload_param_device: \"cpu\" offloads the "
                              "partitioned parameters of ZeRO stage 3; zero_stage is 2");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"offload_param_device\": \"cpu\", "
                              "\"offload_param_nvme_path\": \"/tmp/x\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.offload_param_nvme_path: a path is only used");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"offload_param_device\": \"disk\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.offload_param_device: ");
    // hf_ds_config: DeepSpeed's own JSON (here inline; a string is a file path).
    c = parse_accelerator_config("{\"gradient_accumulation_steps\": 2, \"deepspeed_plugin\": {\"zero_stage\": 1, \"hf_ds_config\": "
                                 "{\"train_batch_size\": \"auto\", \"train_micro_batch_size_per_gpu\": \"auto\", "
                                 "\"gradient_accumulation_steps\": 4, \"gradient_clipping\": 1.0, \"zero_optimization\": "
                                 "{\"stage\": 3, \"offload_optimizer\": {\"device\": \"none\"}, \"reduce_bucket_size\": \"auto\", "
                                 "\"stage3_gather_16bit_weights_on_model_save\": true}, \"bf16\": {\"enabled\": \"auto\"}}}}");
    EXPECT_EQ(c.sharding.zero_stage, 3); // the file wins over the plugin
    EXPECT_TRUE(c.sharding.shard_parameters);
    EXPECT_EQ(c.gradient_accumulation.num_steps, 4);
    EXPECT_DOUBLE_EQ(c.sharding.gradient_clipping, 1.0);
    EXPECT_TRUE(c.sharding.zero3_save_16bit_model);
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"train_batch_size\": 16, "
                                 "\"train_micro_batch_size_per_gpu\": 4, \"zero_optimization\": {\"stage\": 2}}}}");
    EXPECT_EQ(c.gradient_accumulation.num_steps, 4); // 16 / (4 x 1 process)
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"train_batch_size\": 32, "
                              "\"train_micro_batch_size_per_gpu\": 4, \"gradient_accumulation_steps\": 2, "
                              "\"zero_optimization\": {\"stage\": 2}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.hf_ds_config.train_batch_size: 32 is not train_micro_batch_size_per_gpu (4) x "
                              "gradient_accumulation_steps (2) x 1 process(es)");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"train_batch_size\": 8}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config: a DeepSpeed config must have a "
                              "zero_optimization section");
    // A misspelled section is named (issue 42.5), a plain missing one is not given a guess.
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimisation\": {\"stage\": 2}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config: a DeepSpeed config must have a "
                              "zero_optimization section (it has \"zero_optimisation\": misspelled?)");
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"train_micro_batch_size_per_gpu\": 4, "
                                 "\"zero_optimization\": {\"stage\": 2}}}}");
    EXPECT_EQ(c.sharding.ds_micro_batch_size_to_check, std::optional<int64_t>(4));
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"train_micro_batch_size_per_gpu\": 2.5, "
                              "\"zero_optimization\": {\"stage\": 2}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.train_micro_batch_size_per_gpu: "
                              "expected an integer");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 4}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.stage: ");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2, "
                              "\"offload_param\": {\"device\": \"cpu\"}}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.offload_param.device: "
                              "\"cpu\" offloads the partitioned parameters of ZeRO stage 3; zero_stage is 2");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
                              "\"fp16\": {\"enabled\": true}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.fp16.enabled: ");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
                              "\"bogus\": 1}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.bogus: unknown key");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": \"/nonexistent/ds.json\"}}", ACCEL_ERR_NOT_FOUND,
                              "deepspeed_plugin.hf_ds_config: cannot read");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero3_init_flag\": true}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.zero3_init_flag: true applies to ZeRO stage 3 only (zero_stage is 2)");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"zero3_init_flag\": true, \"hf_ds_config\": "
                              "{\"zero_optimization\": {\"stage\": 1}}}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.zero3_init_flag: true applies to ZeRO stage 3 only (zero_stage is 1)");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"zero_stage\": 3, \"zero3_init_flag\": 1}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.zero3_init_flag: ");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"stage\": 2}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "deepspeed_plugin.stage: unknown key");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {}, \"deepspeed_plugin\": {}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin: cannot be combined with deepspeed_plugin");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"auto_wrap_policy\": \"TRANSFORMER_BASED_WRAP\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.transformer_cls_names_to_wrap: ");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"min_num_params\": 10}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.min_num_params: needs auto_wrap_policy");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"state_dict_type\": \"LOCAL_STATE_DICT\"}}", ACCEL_ERR_UNIMPLEMENTED,
                              "fsdp_plugin.state_dict_type: LOCAL_STATE_DICT");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"state_dict_type\": \"SHARDED\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.state_dict_type: expected");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"backward_prefetch\": \"BACKWARD\"}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.backward_prefetch: expected \"BACKWARD_PRE\"");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"backward_prefetch\": 3}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.backward_prefetch: ");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"fsdp_version\": 2, \"forward_prefetch\": true}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.forward_prefetch: does not exist with fsdp_version 2");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"activation_checkpointing\": 1}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.activation_checkpointing: ");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"mixed_precision_policy\": {\"param_dtype\": \"float16\"}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "fsdp_plugin.mixed_precision_policy.param_dtype: float16 inside sharding");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"mixed_precision_policy\": {\"param_dtype\": \"int8\"}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.mixed_precision_policy.param_dtype: ");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"mixed_precision_policy\": {\"output_dtype\": \"bf16\"}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.mixed_precision_policy.output_dtype: unknown key");
    EXPECT_PARSE_ERROR_STARTS("{\"mixed_precision\": \"fp8\", \"fsdp_plugin\": {\"mixed_precision_policy\": {\"param_dtype\": \"bf16\"}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "fsdp_plugin.mixed_precision_policy: bfloat16 parameters together with");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"reshard_after_forward\": true}}", ACCEL_ERR_INVALID_ARGUMENT,
                              "fsdp_plugin.reshard_after_forward: is an fsdp_version 2 key");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"fsdp_version\": 2, \"sharding_strategy\": \"FULL_SHARD\"}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.sharding_strategy: fsdp_version 2");
    EXPECT_PARSE_ERROR_STARTS("{\"fsdp_plugin\": {\"shard\": 1}}", ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin.shard: unknown key");
}

// hf_ds_config's optimizer and scheduler blocks with DeepSpeed's defaults: AdamW (FusedAdam: weight decay 0),
// Adam decoupled unless adam_w_mode is false, torch's SGD by name; WarmupLR (1000 log steps to the optimizer's lr).
TEST_F(AcceleratorConfigTest, DeepSpeedOptimizerAndSchedulerBlocks)
{
    auto c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
                                      "\"optimizer\": {\"type\": \"AdamW\"}, \"scheduler\": {\"type\": \"WarmupLR\"}}}}");
    ASSERT_TRUE(c.sharding.ds_optimizer && c.sharding.ds_scheduler);
    EXPECT_EQ(c.sharding.ds_optimizer->config.type, "adamw");
    EXPECT_EQ(c.sharding.ds_optimizer->config.lr, 1e-3);
    EXPECT_EQ(c.sharding.ds_optimizer->config.weight_decay, 0.0);
    EXPECT_FALSE(c.sharding.ds_optimizer->auto_lr);
    EXPECT_EQ(c.sharding.ds_scheduler->config.type, "WarmupLR");
    EXPECT_EQ(c.sharding.ds_scheduler->config.num_warmup_steps, 1000);
    EXPECT_TRUE(c.sharding.ds_scheduler->config.log_warmup);
    EXPECT_TRUE(c.sharding.ds_scheduler->auto_max_lr);
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
                                 "\"optimizer\": {\"type\": \"Adam\", \"params\": {\"lr\": \"auto\", \"adam_w_mode\": false, "
                                 "\"torch_adam\": true, \"weight_decay\": 0.1}}}}}");
    EXPECT_EQ(c.sharding.ds_optimizer->config.type, "adam");
    EXPECT_TRUE(c.sharding.ds_optimizer->auto_lr);
    EXPECT_EQ(c.sharding.ds_optimizer->config.weight_decay, 0.1);
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
                                 "\"optimizer\": {\"type\": \"SGD\", \"params\": {\"lr\": 0.5, \"momentum\": 0.9}}}}}");
    EXPECT_EQ(c.sharding.ds_optimizer->config.type, "sgd");
    EXPECT_EQ(c.sharding.ds_optimizer->config.momentum, 0.9);
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
                              "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"betas\": [0.9]}}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.optimizer.params.betas: expected 2 numbers");
}

// accel launch --use_fsdp / --use_deepspeed export Accelerate's variables; the JSON config wins.
// hf_ds_config's zero_optimization sizes: numbers kept for prepare's checks against the units, "auto" as absent,
// fractions and negatives named; stage3_prefetch_bucket_size 0 turns prefetching off.
TEST_F(AcceleratorConfigTest, DeepSpeedSizes)
{
    // Hugging Face's usual ZeRO-3 block.
    auto c = parse_accelerator_config(
        "{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, \"overlap_comm\": true, "
        "\"contiguous_gradients\": true, \"sub_group_size\": 1e9, \"reduce_bucket_size\": \"auto\", "
        "\"stage3_prefetch_bucket_size\": \"auto\", \"stage3_param_persistence_threshold\": \"auto\", "
        "\"stage3_max_live_parameters\": 1e9, \"stage3_max_reuse_distance\": 1e9, "
        "\"stage3_gather_16bit_weights_on_model_save\": true}}}}");
    EXPECT_EQ(c.sharding.sub_group_size.value, 1000000000);
    EXPECT_EQ(c.sharding.max_live_parameters.value, 1000000000);
    EXPECT_EQ(c.sharding.max_reuse_distance.value, 1000000000);
    EXPECT_FALSE(c.sharding.reduce_bucket_size.given());
    EXPECT_FALSE(c.sharding.param_persistence_threshold.given());
    EXPECT_EQ(c.sharding.sub_group_size.key, "deepspeed_plugin.hf_ds_config.zero_optimization.sub_group_size");
    EXPECT_TRUE(c.sharding.forward_prefetch);
    EXPECT_EQ(c.sharding.backward_prefetch, "BACKWARD_PRE");
    c = parse_accelerator_config("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                                 "\"stage3_prefetch_bucket_size\": 0}}}}");
    EXPECT_FALSE(c.sharding.forward_prefetch);
    EXPECT_EQ(c.sharding.backward_prefetch, "NO_PREFETCH");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                              "\"reduce_bucket_size\": 1.5}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.reduce_bucket_size: "
                              "expected a whole number of elements");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                              "\"sub_group_size\": -1}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.sub_group_size: ");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                              "\"sub_group_size\": 0}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.sub_group_size: "
                              "expected at least 1 element");
    EXPECT_PARSE_ERROR_STARTS("{\"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 3, "
                              "\"stage3_max_live_parameters\": \"many\"}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.zero_optimization.stage3_max_live_parameters: ");
}

TEST_F(AcceleratorConfigTest, ShardingFromEnvironment)
{
    setenv("ACCELERATE_USE_FSDP", "true", 1);
    setenv("FSDP_SHARDING_STRATEGY", "SHARD_GRAD_OP", 1);
    setenv("FSDP_SYNC_MODULE_STATES", "true", 1);
    auto c = parse_accelerator_config("{}");
    EXPECT_EQ(c.sharding.strategy, "SHARD_GRAD_OP");
    EXPECT_TRUE(c.sharding.sync_module_states);
    setenv("FSDP_SHARDING_STRATEGY", "7", 1);
    EXPECT_PARSE_ERROR_STARTS("{}", ACCEL_ERR_INVALID_ARGUMENT, "FSDP_* environment variables: fsdp_plugin.sharding_strategy: ");
    unsetenv("FSDP_SHARDING_STRATEGY");
    unsetenv("FSDP_SYNC_MODULE_STATES");
    unsetenv("ACCELERATE_USE_FSDP");
    setenv("ACCELERATE_USE_DEEPSPEED", "true", 1);
    setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3", 1);
    c = parse_accelerator_config("{}");
    EXPECT_EQ(c.sharding.frontend, "deepspeed");
    EXPECT_EQ(c.sharding.zero_stage, 3);
    setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.offload_param_device, "cpu");
    setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2", 1);
    EXPECT_PARSE_ERROR_STARTS("{}", ACCEL_ERR_INVALID_ARGUMENT,
                              "ACCELERATE_DEEPSPEED_* environment variables: deepspeed_plugin.offload_param_device: ");
    unsetenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE");
    unsetenv("ACCELERATE_DEEPSPEED_ZERO_STAGE");
    unsetenv("ACCELERATE_USE_DEEPSPEED");
    EXPECT_FALSE(parse_accelerator_config("{}").sharding.enabled());
}

// `accel launch --use_fsdp` with a JSON deepspeed_plugin: the JSON wins (Accelerate's precedence), and the user is
// told the launch line's engine is not the one that runs (issue 42.5).
TEST_F(AcceleratorConfigTest, LaunchEngineOverriddenByJsonIsSaid)
{
    setenv("ACCELERATE_USE_FSDP", "true", 1);
    testing::internal::CaptureStderr();
    auto c = parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 3}}");
    const std::string err = testing::internal::GetCapturedStderr();
    unsetenv("ACCELERATE_USE_FSDP");
    EXPECT_EQ(c.sharding.frontend, "deepspeed");
    EXPECT_NE(err.find("ACCELERATE_USE_FSDP is set (accel launch --use_fsdp) but the accelerator's JSON config has "
                       "deepspeed_plugin, which wins: training runs DeepSpeed ZeRO"), std::string::npos) << err;
    testing::internal::CaptureStderr();
    parse_accelerator_config("{\"deepspeed_plugin\": {\"zero_stage\": 3}}");
    EXPECT_EQ(testing::internal::GetCapturedStderr(), ""); // nothing to say without the launch flag
}

// What Accelerate's launchers export whatever was asked (0.24.1 run; 1.x from its source, utils/launch.py) is read
// as its plugins read it, never refused: FSDP_MIN_NUM_PARAMS only for SIZE_BASED_WRAP, FSDP_SHARDING_STRATEGY only
// with fsdp_version 1, FSDP_RESHARD_AFTER_FORWARD a boolean with version 2 and, with version 1, the strategy only
// when FSDP_SHARDING_STRATEGY is unset; ACCELERATE_DEEPSPEED_CONFIG_FILE=none is no file. torchrun's agent store.
TEST_F(AcceleratorConfigTest, ShardingFromLaunchersDefaults)
{
    setenv("ACCELERATE_USE_FSDP", "true", 1);
    setenv("FSDP_MIN_NUM_PARAMS", "100000000.0", 1); // 0.24.1's default, exported with any policy
    auto c = parse_accelerator_config("{}");
    EXPECT_EQ(c.sharding.auto_wrap_policy, "NO_WRAP");
    setenv("FSDP_AUTO_WRAP_POLICY", "TRANSFORMER_BASED_WRAP", 1);
    setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", "gpt_block", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.wrap_classes, std::vector<std::string>{"gpt_block"});
    setenv("FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP", 1);
    unsetenv("FSDP_TRANSFORMER_CLS_TO_WRAP");
    setenv("FSDP_MIN_NUM_PARAMS", "2000", 1);
    c = parse_accelerator_config("{}");
    EXPECT_EQ(c.sharding.auto_wrap_policy, "SIZE_BASED_WRAP");
    EXPECT_EQ(c.sharding.min_num_params, 2000);
    unsetenv("FSDP_AUTO_WRAP_POLICY");
    // 1.x, FSDP1: the strategy variable wins over the reshard one (true by default, or a lower-cased strategy).
    setenv("FSDP_VERSION", "1", 1);
    setenv("FSDP_SHARDING_STRATEGY", "FULL_SHARD", 1);
    setenv("FSDP_RESHARD_AFTER_FORWARD", "true", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.strategy, "FULL_SHARD");
    setenv("FSDP_RESHARD_AFTER_FORWARD", "shard_grad_op", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.strategy, "FULL_SHARD");
    unsetenv("FSDP_SHARDING_STRATEGY");
    EXPECT_EQ(parse_accelerator_config("{}").sharding.strategy, "SHARD_GRAD_OP");
    setenv("FSDP_RESHARD_AFTER_FORWARD", "false", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.strategy, "SHARD_GRAD_OP");
    setenv("FSDP_RESHARD_AFTER_FORWARD", "NO_RESHARD", 1); // in 1.x's help, but no ShardingStrategy
    EXPECT_PARSE_ERROR_STARTS("{}", ACCEL_ERR_INVALID_ARGUMENT, "FSDP_* environment variables: fsdp_plugin.sharding_strategy: ");
    // 1.x, FSDP2: FSDP_SHARDING_STRATEGY (FULL_SHARD by default) is ignored, the reshard variable is a boolean.
    setenv("FSDP_VERSION", "2", 1);
    setenv("FSDP_SHARDING_STRATEGY", "FULL_SHARD", 1);
    setenv("FSDP_RESHARD_AFTER_FORWARD", "false", 1);
    c = parse_accelerator_config("{}");
    EXPECT_EQ(c.sharding.fsdp_version, 2);
    EXPECT_FALSE(c.sharding.reshard_after_forward);
    setenv("FSDP_RESHARD_AFTER_FORWARD", "full_shard", 1);
    EXPECT_PARSE_ERROR_STARTS("{}", ACCEL_ERR_INVALID_ARGUMENT, "environment variable FSDP_RESHARD_AFTER_FORWARD: ");
    for (const char *k : {"FSDP_VERSION", "FSDP_SHARDING_STRATEGY", "FSDP_RESHARD_AFTER_FORWARD", "FSDP_MIN_NUM_PARAMS",
                          "ACCELERATE_USE_FSDP"})
        unsetenv(k);
    setenv("ACCELERATE_USE_DEEPSPEED", "true", 1);
    setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", "none", 1);
    EXPECT_EQ(parse_accelerator_config("{}").sharding.frontend, "deepspeed");
    setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", "/nonexistent/ds.json", 1);
    EXPECT_PARSE_ERROR_STARTS("{}", ACCEL_ERR_NOT_FOUND, "ACCELERATE_DEEPSPEED_* environment variables: "
                                                         "deepspeed_plugin.hf_ds_config: cannot read");
    unsetenv("ACCELERATE_DEEPSPEED_CONFIG_FILE");
    unsetenv("ACCELERATE_USE_DEEPSPEED");
    // torchrun's agent store (its TORCHELASTIC_USE_AGENT_STORE is "True" exactly, as torch tests it).
    EXPECT_FALSE(parse_accelerator_config("{}").topology.agent_store);
    setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "2", 1);
    c = parse_accelerator_config("{}");
    EXPECT_TRUE(c.topology.agent_store);
    EXPECT_EQ(c.topology.restart_count, "2");
    unsetenv("TORCHELASTIC_USE_AGENT_STORE");
    unsetenv("TORCHELASTIC_RESTART_COUNT");
}


// deepspeed_plugin with fp16: DeepSpeed's loss scaler, from the fp16 block (DeepSpeed's defaults when its keys
// are spelled out, ZeRO's class defaults when none is).
TEST_F(AcceleratorConfigTest, DeepSpeedFp16LossScaler)
{
    AcceleratorConfig c = parse_accelerator_config(
        "{\"mixed_precision\": \"fp16\", \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": {\"stage\": 2}, "
        "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 8, \"loss_scale_window\": 2, \"min_loss_scale\": 4}}}}");
    ASSERT_TRUE(c.grad_scaler.deepspeed.has_value());
    EXPECT_EQ(c.grad_scaler.deepspeed->initial_scale, 256.0);
    EXPECT_EQ(c.grad_scaler.deepspeed->loss_scale_window, 2);
    EXPECT_EQ(c.grad_scaler.deepspeed->hysteresis, 2);
    EXPECT_EQ(c.grad_scaler.deepspeed->min_loss_scale, 4.0);
    EXPECT_EQ(c.grad_scaler.deepspeed->loss_scale, 0.0);
    AcceleratorConfig plain = parse_accelerator_config("{\"mixed_precision\": \"fp16\", \"deepspeed_plugin\": {}}");
    ASSERT_TRUE(plain.grad_scaler.deepspeed.has_value());
    EXPECT_EQ(plain.grad_scaler.deepspeed->initial_scale, 4294967296.0);
    EXPECT_EQ(plain.grad_scaler.deepspeed->hysteresis, 1);
    EXPECT_FALSE(parse_accelerator_config("{\"mixed_precision\": \"fp16\"}").grad_scaler.deepspeed.has_value());
    EXPECT_FALSE(parse_accelerator_config("{\"deepspeed_plugin\": {}}").grad_scaler.deepspeed.has_value());
    EXPECT_PARSE_ERROR_STARTS("{\"mixed_precision\": \"fp16\", \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": "
                              "{\"stage\": 2}, \"fp16\": {\"enabled\": true, \"hysteresis\": 0}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.fp16.hysteresis: ");
    EXPECT_PARSE_ERROR_STARTS("{\"mixed_precision\": \"fp16\", \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": "
                              "{\"stage\": 2}, \"fp16\": {\"enabled\": true, \"initial_scale_power\": 2, \"min_loss_scale\": 8}}}}",
                              ACCEL_ERR_INVALID_ARGUMENT, "deepspeed_plugin.hf_ds_config.fp16.min_loss_scale: ");
    EXPECT_PARSE_ERROR_STARTS("{\"mixed_precision\": \"fp16\", \"deepspeed_plugin\": {\"hf_ds_config\": {\"zero_optimization\": "
                              "{\"stage\": 2}, \"fp16\": {\"enabled\": true, \"auto_cast\": false}}}}",
                              ACCEL_ERR_UNIMPLEMENTED, "deepspeed_plugin.hf_ds_config.fp16.auto_cast: ");
}
