// parallelism_config (Accelerate's ParallelismConfig): sizes from JSON or the PARALLELISM_CONFIG_* environment,
// checked against the job, the plugins and what accel builds today.
#include "config/parallelism_config.hpp"

#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/env.hpp"
#include "config/json.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <optional>

namespace accel::config {

namespace {

struct SizeKey {
    const char *key;        // JSON key under parallelism_config
    const char *env;        // what Accelerate's __post_init__ reads when the field is None
    int32_t ParallelismConfig::*field;
};

const SizeKey kSizes[] = {
    {"dp_replicate_size", "PARALLELISM_CONFIG_DP_REPLICATE_SIZE", &ParallelismConfig::dp_replicate_size},
    {"dp_shard_size", "PARALLELISM_CONFIG_DP_SHARD_SIZE", &ParallelismConfig::dp_shard_size},
    {"tp_size", "PARALLELISM_CONFIG_TP_SIZE", &ParallelismConfig::tp_size},
    {"cp_size", "PARALLELISM_CONFIG_CP_SIZE", &ParallelismConfig::cp_size},
    {"sp_size", "PARALLELISM_CONFIG_SP_SIZE", &ParallelismConfig::sp_size},
    {"pp_size", "PARALLELISM_CONFIG_PP_SIZE", &ParallelismConfig::pp_size},
};

// An environment size as Accelerate's int(os.environ[...]): an integer (surrounding blanks allowed).
std::optional<int64_t> env_size(const char *name)
{
    const auto v = env_string(name);
    if (!v) return std::nullopt;
    errno = 0;
    char *end = nullptr;
    const long long x = std::strtoll(v->c_str(), &end, 10);
    while (end != nullptr && std::isspace(static_cast<unsigned char>(*end))) ++end;
    if (end == v->c_str() || *end != '\0' || errno == ERANGE || x < INT32_MIN || x > INT32_MAX)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected an integer, got \"" + *v + "\"");
    return x;
}

bool env_true(const char *name)
{
    std::string v = env_string(name).value_or("false");
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
    return v == "true";
}

// sp_handler.sp_attn_implementation: the kernel DeepSpeed's Ulysses runs on each rank's heads. "sdpa" is exact
// attention, which accel's own computation is; the flash kernels (and hub-hosted ones) are not built; "eager"
// and "flex_attention" Accelerate itself refuses.
void check_sp_attn_implementation(const std::string &v, const std::string &where)
{
    if (v == "sdpa") return;
    if (v == "eager" || v == "flex_attention")
        fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": \"" + v + "\" is not supported with sequence parallelism (as in "
                                                 "Accelerate); use \"sdpa\"");
    if (v == "flash_attention_2" || v == "flash_attention_3" ||
        (v.find('/') != std::string::npos && v.find("flash-attn") != std::string::npos))
        fail(ACCEL_ERR_UNIMPLEMENTED, where + ": \"" + v + "\" is not built (accel computes exact attention itself, "
                                              "as \"sdpa\" does); use \"sdpa\"");
    fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected \"sdpa\", \"flash_attention_2\", \"flash_attention_3\" or "
                                             "a hub-hosted flash attention kernel, got \"" + v + "\"");
}

// The handlers' fields as Accelerate names them; they only matter once their dimension is built, but a
// typo is refused now.
void parse_handlers(JsonObject &o, ParallelismConfig &p)
{
    if (auto tp = o.get_object("tp_handler")) { // TorchTensorParallelConfig
        if (tp->get_bool("enable_async_tp", false)) // an overlap of the tp collectives with the matmuls
            fail(ACCEL_ERR_UNIMPLEMENTED, tp->path_of("enable_async_tp") +
                                              ": true is not built yet (async tensor parallelism; the results are "
                                              "the same without it): set it false");
        p.sequence_parallel = tp->get_bool("sequence_parallel", false);
        tp->finish();
    }
    if (auto cp = o.get_object("cp_handler")) { // TorchContextParallelConfig
        p.cp_comm_strategy = cp->get_enum("cp_comm_strategy", p.cp_comm_strategy, {"allgather", "alltoall"});
        cp->finish();
    }
    if (auto sp = o.get_object("sp_handler")) { // DeepSpeedSequenceParallelConfig
        if (auto n = sp->get_optional_int("sp_seq_length", 1, INT32_MAX)) p.sp_seq_length = *n;
        p.sp_seq_length_is_variable = sp->get_bool("sp_seq_length_is_variable", p.sp_seq_length_is_variable);
        if (auto a = sp->get_optional_string("sp_attn_implementation"))
            check_sp_attn_implementation(*a, sp->path_of("sp_attn_implementation"));
        sp->finish();
    }
}

// sp_handler's environment, as DeepSpeedSequenceParallelConfig's __post_init__ reads it for fields left unset
// (the launcher's --parallelism_config_sp_* flags and config-file keys arrive this way); the JSON overrides it.
void sp_handler_from_env(ParallelismConfig &p)
{
    if (auto v = env_string("PARALLELISM_CONFIG_SP_SEQ_LENGTH"); v && *v != "None") {
        const auto n = env_size("PARALLELISM_CONFIG_SP_SEQ_LENGTH");
        if (*n < 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable PARALLELISM_CONFIG_SP_SEQ_LENGTH: must be at least 1, got " + *v);
        p.sp_seq_length = *n;
    }
    if (auto v = env_string("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE")) {
        std::string t = *v;
        std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return std::tolower(ch); });
        p.sp_seq_length_is_variable = t == "true";
    }
    if (auto v = env_string("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION"))
        check_sp_attn_implementation(*v, "environment variable PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION");
}

// The pipeline's keys (MegatronLMPlugin's num_micro_batches; accel's pp_schedule and pp_split_points). The
// split points are checked against the model's blocks at prepare.
void parse_pipeline(JsonObject &o, ParallelismConfig &p)
{
    p.num_micro_batches = static_cast<int32_t>(o.get_int("num_micro_batches", p.num_micro_batches, 1, INT32_MAX));
    const char *lpv = "num_layers_per_virtual_pipeline_stage", *vpr = "num_virtual_stages_per_pipeline_rank";
    p.num_layers_per_virtual_pipeline_stage = o.get_int(lpv, 0, 1, INT32_MAX);
    p.num_virtual_stages_per_pipeline_rank = static_cast<int32_t>(o.get_int(vpr, 0, 1, INT32_MAX));
    const bool chunked = o.has(lpv) || o.has(vpr);
    // As Megatron: virtual stages mean the interleaved schedule.
    p.pp_schedule = o.get_enum("pp_schedule", chunked ? "interleaved_1f1b" : p.pp_schedule, {"gpipe", "1f1b", "interleaved_1f1b"});
    const bool interleaved = p.pp_schedule == "interleaved_1f1b";
    if (chunked && !interleaved)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(o.has(lpv) ? lpv : vpr) + ": model chunks per stage need pp_schedule "
                                         "\"interleaved_1f1b\", not \"" + p.pp_schedule + "\"");
    if (interleaved && !chunked)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("pp_schedule") + ": \"interleaved_1f1b\" needs the model chunks per "
                                         "stage: set " + lpv + " or " + vpr);
    // One stage runs no pipeline: a key that shapes one would be parsed and ignored, so it is refused by name.
    if (p.pp_size == 1) {
        const char *shaping = p.num_micro_batches > 1 ? "num_micro_batches"
                              : o.has(lpv)            ? lpv
                              : o.has(vpr)            ? vpr
                              : interleaved           ? "pp_schedule"
                              : o.has("pp_split_points") ? "pp_split_points"
                                                         : nullptr;
        if (shaping != nullptr)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(shaping) + ": shapes a pipeline, but pp_size is 1 (no pipeline "
                                             "is built); set pp_size above 1 or remove the key");
    }
    if (o.has("pp_split_points")) {
        p.pp_split_points = o.get_int_array("pp_split_points", 1, INT32_MAX);
        // Interleaved, the points cut pp_size x chunks virtual stages: prepare checks them against the model.
        if (!interleaved && p.pp_split_points.size() + 1 != static_cast<size_t>(p.pp_size))
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("pp_split_points") + ": " + std::to_string(p.pp_split_points.size()) +
                                                 " split points for pp_size " + std::to_string(p.pp_size) +
                                                 " stages; give pp_size - 1 block indices");
        for (size_t i = 1; i < p.pp_split_points.size(); ++i)
            if (p.pp_split_points[i] <= p.pp_split_points[i - 1])
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("pp_split_points") + ": must be strictly ascending");
    }
}

} // namespace

void parse_parallelism_config(JsonObject &root, AcceleratorConfig &c)
{
    ParallelismConfig &p = c.parallelism;
    std::optional<JsonObject> obj = root.get_object("parallelism_config");
    // As Accelerate: a ParallelismConfig() exists when one is passed or ACCELERATE_USE_PARALLELISM_CONFIG is true
    // (accelerate launch --parallelism_config_*); its fields default to the environment, then 1.
    if (!obj && !env_true("ACCELERATE_USE_PARALLELISM_CONFIG")) return;
    p.given = true;
    const std::string prefix = obj ? obj->path() : std::string("parallelism_config");
    for (const SizeKey &k : kSizes) {
        int64_t v = 1;
        std::string where = std::string("environment variable ") + k.env;
        if (obj && obj->has(k.key)) {
            v = obj->get_int(k.key, 1, INT32_MIN, INT32_MAX);
            where = obj->path_of(k.key);
        } else if (auto e = env_size(k.env)) {
            v = *e;
        }
        if (v < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": must be at least 1, got " + std::to_string(v));
        p.*k.field = static_cast<int32_t>(v);
    }
    p.cp_backend = env_string("PARALLELISM_CONFIG_CP_BACKEND").value_or(p.cp_backend);
    p.sp_backend = env_string("PARALLELISM_CONFIG_SP_BACKEND").value_or(p.sp_backend);
    if (auto v = env_string("PARALLELISM_CONFIG_CP_COMM_STRATEGY")) p.cp_comm_strategy = *v;
    sp_handler_from_env(p);
    if (obj) {
        p.cp_backend = obj->get_enum("cp_backend", p.cp_backend, {"torch"});
        p.sp_backend = obj->get_enum("sp_backend", p.sp_backend, {"deepspeed"});
        parse_handlers(*obj, p);
        parse_pipeline(*obj, p);
        obj->finish();
    }
    if (p.cp_backend != "torch")
        fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable PARALLELISM_CONFIG_CP_BACKEND: expected \"torch\", got \"" + p.cp_backend + "\"");
    if (p.sp_backend != "deepspeed")
        fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable PARALLELISM_CONFIG_SP_BACKEND: expected \"deepspeed\", got \"" +
                                             p.sp_backend + "\"");

    const int32_t world = std::max(1, c.topology.world_size);
    const int64_t total =
        static_cast<int64_t>(p.dp_replicate_size) * p.dp_shard_size * p.tp_size * p.cp_size * p.sp_size * p.pp_size;
    // Accelerate: an all-ones config on several processes replicates over all of them (DDP).
    if (total == 1) p.dp_replicate_size = world;
    else if (total != world)
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             prefix + ": dp_replicate_size (" + std::to_string(p.dp_replicate_size) + ") x dp_shard_size (" +
                 std::to_string(p.dp_shard_size) + ") x tp_size (" + std::to_string(p.tp_size) + ") x cp_size (" +
                 std::to_string(p.cp_size) + ") x sp_size (" + std::to_string(p.sp_size) + ") x pp_size (" +
                 std::to_string(p.pp_size) + ") = " + std::to_string(total) +
                 " processes, but the job has " + std::to_string(world) + " (num_processes)");
    const std::string plugin = c.sharding.frontend == "deepspeed" ? "deepspeed_plugin" : "fsdp_plugin";
    if (!p.sp_seq_length_is_variable && p.sp_seq_length == 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, prefix + ".sp_handler: with sp_seq_length_is_variable false, sp_seq_length "
                                                  "must be given (or PARALLELISM_CONFIG_SP_SEQ_LENGTH)");
    if (p.sequence_parallel && p.tp_size == 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, prefix + ".tp_handler.sequence_parallel: splits the sequence over the tp "
                                                  "group, but tp_size is 1");
    // Accelerate refuses the two together, and accel runs Ulysses on the mesh's cp axis
    // (src/parallel/context_parallel/ulysses.hpp): one or the other.
    if (p.cp_size > 1 && p.sp_size > 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, prefix + ": cp_size (" + std::to_string(p.cp_size) + ") with sp_size (" +
                                             std::to_string(p.sp_size) + "): context and Ulysses sequence parallelism "
                                             "are mutually exclusive (as in Accelerate); set cp_size or sp_size to 1");
    // Pipeline stages compose with DDP (each stage is dp_replicate_size processes), tensor parallelism (each
    // stage split over tp_size), context or Ulysses parallelism (each stage's sequence split over its cp group) and
    // the sharding engine (each stage's parameters, tp slices included, sharded over its dp_shard_cp processes;
    // src/parallel/pipeline), all of them at once. Not yet the plugins' partitioned builds of a whole model.
    if (p.pp_size > 1 && c.sharding.enabled()) {
        if (c.sharding.zero3_init_flag || c.sharding.cpu_ram_efficient_loading)
            fail(ACCEL_ERR_UNIMPLEMENTED, plugin + "." + (c.sharding.zero3_init_flag ? "zero3_init_flag" : "cpu_ram_efficient_loading") +
                                              ": with pipeline parallelism (parallelism_config.pp_size " +
                                              std::to_string(p.pp_size) + ") is not built yet: the model is built "
                                              "whole and cut into its stage at prepare; set it to false");
    }
    if (p.dp_shard_size > 1 && !c.sharding.enabled())
        fail(ACCEL_ERR_INVALID_ARGUMENT, prefix + ".dp_shard_size: " + std::to_string(p.dp_shard_size) +
                                             " shards the model, which needs fsdp_plugin or deepspeed_plugin; for "
                                             "DDP over every process use dp_replicate_size");
    // HYBRID_SHARD's node groups give way to the mesh: its replicas must then be dp_replicate_size's.
    if (c.sharding.enabled() && c.sharding.strategy.rfind("HYBRID_SHARD", 0) == 0 && p.dp_replicate_size == 1 && world > 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, plugin + ".sharding_strategy: " + c.sharding.strategy +
                                             " with parallelism_config replicates over dp_replicate_size, which is 1; "
                                             "set dp_replicate_size (nodes) and dp_shard_size (processes per node)");
}

} // namespace accel::config
