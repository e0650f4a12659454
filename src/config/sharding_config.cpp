// fsdp_plugin and deepspeed_plugin (FullyShardedDataParallelPlugin / DeepSpeedPlugin fields, with
// Accelerate's names and defaults; sharding-and-parallelism.md §2-3), from the JSON config or, when the
// config has none, from what `accel launch --use_fsdp / --use_deepspeed` exports. Every key either
// changes what the engine does or is rejected by name.
#include "config/accelerator_config.hpp"

#include "common/error.hpp"
#include "config/env.hpp"
#include "config/json.hpp"
#include "logging/logger.hpp"

#include <cjson/cJSON.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

namespace accel::config {

namespace {

std::string upper(std::string s)
{
    for (char &ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
}

bool env_truthy(const char *name)
{
    auto v = env_string(name);
    if (!v) return false;
    std::string s = upper(*v);
    if (s == "1" || s == "TRUE" || s == "YES") return true;
    if (s == "0" || s == "FALSE" || s == "NO") return false;
    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected true or false, got \"" +
                                         *v + "\"");
}

// An environment variable as a JSON value of the kind `kind` ("bool", "int", "number", "string", "list").
cJSON *env_value(const char *name, const std::string &v, const char *kind)
{
    std::string k = kind;
    if (k == "bool") {
        std::string s = upper(v);
        if (s == "1" || s == "TRUE" || s == "YES") return cJSON_CreateTrue();
        if (s == "0" || s == "FALSE" || s == "NO") return cJSON_CreateFalse();
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected true or false, got \"" +
                                             v + "\"");
    }
    if (k == "int" || k == "number") {
        char *end = nullptr;
        double d = std::strtod(v.c_str(), &end);
        if (end == v.c_str() || *end != '\0')
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected a number, got \"" +
                                                 v + "\"");
        return cJSON_CreateNumber(d);
    }
    if (k == "list") {
        cJSON *arr = cJSON_CreateArray();
        size_t start = 0;
        while (start <= v.size()) {
            size_t comma = v.find(',', start);
            std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
            while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(0, 1);
            while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
            if (!item.empty()) cJSON_AddItemToArray(arr, cJSON_CreateString(item.c_str()));
            if (comma == std::string::npos) break;
            start = comma + 1;
        }
        return arr;
    }
    return cJSON_CreateString(v.c_str());
}

struct EnvKey {
    const char *env;
    const char *key;
    const char *kind;
};

// A plugin object built from environment variables (only those set), owned by the caller.
std::unique_ptr<cJSON, void (*)(cJSON *)> object_from_env(std::initializer_list<EnvKey> keys)
{
    std::unique_ptr<cJSON, void (*)(cJSON *)> obj(cJSON_CreateObject(), cJSON_Delete);
    for (const auto &k : keys)
        if (auto v = env_string(k.env)) {
            // FSDP_SHARDING_STRATEGY may be a number (1-5) or a name; keep it a string, parsed below.
            cJSON_AddItemToObject(obj.get(), k.key, env_value(k.env, *v, k.kind));
        }
    return obj;
}

// The FSDP variables Accelerate's launchers export whatever was asked, read as its FullyShardedDataParallelPlugin
// reads them (a program the real `accelerate launch` starts must not be refused for them):
// - FSDP_MIN_NUM_PARAMS (0.24.1: 1e8 by default, 1.x: 100000000) counts only for SIZE_BASED_WRAP;
// - FSDP_SHARDING_STRATEGY (1.x: FULL_SHARD by default) counts only with fsdp_version 1;
// - FSDP_RESHARD_AFTER_FORWARD (1.x only: "true" by default, or an FSDP1 strategy name lower-cased from a config
//   file) is a boolean with fsdp_version 2. With version 1 the plugin takes FSDP_SHARDING_STRATEGY when it is set
//   (1.x's launcher always sets it) and otherwise the strategy this variable names; accel also reads true and
//   false there as FULL_SHARD and SHARD_GRAD_OP, which is what they mean with version 2.
void add_launcher_defaults_from_env(cJSON *obj)
{
    const bool v2 = env_string("FSDP_VERSION").value_or("1") == "2";
    if (auto p = env_string("FSDP_AUTO_WRAP_POLICY"); p && upper(*p) == "SIZE_BASED_WRAP")
        if (auto v = env_string("FSDP_MIN_NUM_PARAMS"))
            cJSON_AddItemToObject(obj, "min_num_params", env_value("FSDP_MIN_NUM_PARAMS", *v, "int"));
    auto strategy = env_string("FSDP_SHARDING_STRATEGY");
    auto reshard = env_string("FSDP_RESHARD_AFTER_FORWARD");
    if (v2) {
        if (reshard) cJSON_AddItemToObject(obj, "reshard_after_forward", env_value("FSDP_RESHARD_AFTER_FORWARD", *reshard, "bool"));
        return;
    }
    if (!strategy && reshard) {
        const std::string r = upper(*reshard);
        if (r == "TRUE" || r == "1" || r == "YES") strategy = "FULL_SHARD";
        else if (r == "FALSE" || r == "0" || r == "NO") strategy = "SHARD_GRAD_OP";
        else strategy = *reshard; // a strategy name or number, checked with the other sharding_strategy values
    }
    if (strategy) cJSON_AddStringToObject(obj, "sharding_strategy", strategy->c_str());
}

void parse_fsdp(JsonObject &o, AcceleratorConfig &c)
{
    ShardingConfig &s = c.sharding;
    s.frontend = "fsdp";
    s.fsdp_version = o.get_int("fsdp_version", 1, 1, 2);
    const bool v2 = s.fsdp_version == 2;

    // Strategy (v1) or reshard_after_forward (v2).
    std::string strategy = "FULL_SHARD";
    if (o.has("sharding_strategy")) {
        if (v2)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("sharding_strategy") + ": fsdp_version 2 has no sharding "
                                                                              "strategy; use reshard_after_forward");
        static const char *names[] = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"};
        if (o.is_string("sharding_strategy")) {
            std::string v = upper(o.get_string("sharding_strategy", ""));
            if (v == "_HYBRID_SHARD_ZERO2") v = "HYBRID_SHARD_ZERO2";
            if (v.size() == 1 && v[0] >= '1' && v[0] <= '5') v = names[v[0] - '1'];
            bool known = false;
            for (const char *n : names) known = known || v == n;
            if (!known)
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("sharding_strategy") + ": expected one of \"FULL_SHARD\", "
                                                 "\"SHARD_GRAD_OP\", \"NO_SHARD\", \"HYBRID_SHARD\", "
                                                 "\"HYBRID_SHARD_ZERO2\" (or 1-5), got \"" + o.get_string("sharding_strategy", "") + "\"");
            strategy = v;
        } else {
            strategy = names[o.get_int("sharding_strategy", 1, 1, 5) - 1];
        }
    }
    if (o.has("reshard_after_forward")) {
        if (!v2)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("reshard_after_forward") + ": is an fsdp_version 2 key; with "
                                             "version 1 sharding_strategy decides (FULL_SHARD reshards after forward, "
                                             "SHARD_GRAD_OP does not)");
    }
    if (v2) strategy = o.get_bool("reshard_after_forward", true) ? "FULL_SHARD" : "SHARD_GRAD_OP";
    if (strategy == "HYBRID_SHARD" || strategy == "HYBRID_SHARD_ZERO2") {
        const auto &t = c.topology;
        if (t.local_world_size >= t.world_size)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("sharding_strategy") + ": " + strategy + " shards inside a node "
                                             "and replicates across nodes, and this run has one node (" +
                                             std::to_string(t.world_size) + " processes, " +
                                             std::to_string(t.local_world_size) + " per node); use FULL_SHARD");
        if (t.world_size % t.local_world_size != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("sharding_strategy") + ": " + strategy + " needs the same number "
                                             "of processes on every node (" + std::to_string(t.world_size) +
                                             " is not a multiple of " + std::to_string(t.local_world_size) + ")");
        s.hybrid_group_size = t.local_world_size;
    }
    s.strategy = strategy;
    if (strategy == "FULL_SHARD" || strategy == "HYBRID_SHARD") {
        s.shard_optimizer = s.shard_gradients = s.shard_parameters = s.reshard_after_forward = true;
    } else if (strategy == "SHARD_GRAD_OP" || strategy == "HYBRID_SHARD_ZERO2") {
        s.shard_optimizer = s.shard_gradients = s.shard_parameters = true;
    }

    // Wrap policy.
    std::string policy = upper(o.get_string("auto_wrap_policy", "NO_WRAP"));
    if (policy != "NO_WRAP" && policy != "TRANSFORMER_BASED_WRAP" && policy != "SIZE_BASED_WRAP")
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("auto_wrap_policy") + ": expected \"NO_WRAP\", "
                                         "\"TRANSFORMER_BASED_WRAP\" or \"SIZE_BASED_WRAP\", got \"" +
                                         o.get_string("auto_wrap_policy", "") + "\"");
    s.wrap_classes = o.get_string_array("transformer_cls_names_to_wrap", {});
    s.min_num_params = o.get_int("min_num_params", 0, 0, INT64_MAX / 2);
    if (!s.wrap_classes.empty() && policy != "TRANSFORMER_BASED_WRAP")
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("transformer_cls_names_to_wrap") + ": needs auto_wrap_policy "
                                         "\"TRANSFORMER_BASED_WRAP\" (got \"" + policy + "\")");
    if (policy == "TRANSFORMER_BASED_WRAP" && s.wrap_classes.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("transformer_cls_names_to_wrap") + ": TRANSFORMER_BASED_WRAP needs "
                                         "the layer types to wrap (accel's models have no _no_split_modules to "
                                         "default to), e.g. [\"transformer_encoder_layer\"]");
    if (o.has("min_num_params") && policy != "SIZE_BASED_WRAP")
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("min_num_params") + ": needs auto_wrap_policy \"SIZE_BASED_WRAP\" "
                                         "(got \"" + policy + "\")");
    // Accelerate: min_num_params 0 disables the size policy.
    s.auto_wrap_policy = (policy == "SIZE_BASED_WRAP" && s.min_num_params == 0) ? "NO_WRAP" : policy;

    // FSDP's CPUOffload(offload_params=True): parameters and gradients in host memory, the step there.
    if (o.get_bool("cpu_offload", false)) s.offload_param_device = "cpu";
    s.state_dict_type = upper(o.get_string("state_dict_type", v2 ? "SHARDED_STATE_DICT" : "FULL_STATE_DICT"));
    if (s.state_dict_type != "FULL_STATE_DICT" && s.state_dict_type != "SHARDED_STATE_DICT" &&
        s.state_dict_type != "LOCAL_STATE_DICT")
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("state_dict_type") + ": expected \"FULL_STATE_DICT\", "
                                         "\"SHARDED_STATE_DICT\" or \"LOCAL_STATE_DICT\", got \"" + s.state_dict_type + "\"");
    if (s.state_dict_type == "LOCAL_STATE_DICT")
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("state_dict_type") + ": LOCAL_STATE_DICT (FSDP1's flat per-rank "
                                      "parameters) is not supported by accel; use \"SHARDED_STATE_DICT\" (per-rank "
                                      "pieces that load on any number of processes) or \"FULL_STATE_DICT\"");
    if (v2 && o.has("forward_prefetch") && o.get_bool("forward_prefetch", false))
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("forward_prefetch") + ": does not exist with fsdp_version 2");
    s.forward_prefetch = o.get_bool("forward_prefetch", false);
    if (o.has("backward_prefetch")) {
        std::string bp = o.is_string("backward_prefetch") ? upper(o.get_string("backward_prefetch", ""))
                                                          : std::to_string(o.get_int("backward_prefetch", 0, 1, 2));
        if (bp == "1") bp = "BACKWARD_PRE"; // torch.distributed.fsdp.BackwardPrefetch's values
        if (bp == "2") bp = "BACKWARD_POST";
        if (bp != "NO_PREFETCH" && bp != "BACKWARD_PRE" && bp != "BACKWARD_POST")
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("backward_prefetch") + ": expected \"BACKWARD_PRE\", "
                                             "\"BACKWARD_POST\" or \"NO_PREFETCH\", got \"" + bp + "\"");
        s.backward_prefetch = bp;
    } else {
        o.get_optional_string("backward_prefetch"); // null: Accelerate's default, no prefetching
    }
    s.limit_all_gathers = o.get_bool("limit_all_gathers", true);
    s.use_orig_params = o.get_bool("use_orig_params", false);
    s.sync_module_states = o.get_bool("sync_module_states", false);
    s.cpu_ram_efficient_loading = o.get_bool("cpu_ram_efficient_loading", false);
    if (s.cpu_ram_efficient_loading) s.sync_module_states = true; // Accelerate forces it
    // Recomputing each transformer block's activations in backward (checkpoint_wrapper on the wrapped layers):
    // models of type "gpt" (checked when the model is prepared).
    s.activation_checkpointing = o.get_bool("activation_checkpointing", false);
    if (o.has("ignored_modules"))
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("ignored_modules") + ": ignoring modules is not yet supported by accel");
    if (auto mp = o.get_object("mixed_precision_policy")) {
        std::string *fields[] = {&s.param_dtype, &s.reduce_dtype, &s.buffer_dtype};
        const char *keys[] = {"param_dtype", "reduce_dtype", "buffer_dtype"};
        for (int i = 0; i < 3; ++i) {
            std::string d = mp->get_enum(keys[i], "float32", {"float32", "fp32", "bfloat16", "bf16", "float16", "fp16"});
            if (d == "float16" || d == "fp16")
                fail(ACCEL_ERR_UNIMPLEMENTED, mp->path_of(keys[i]) + ": float16 inside sharding is not yet supported by "
                                              "accel (this CPU LibTorch has no float16 maths); use \"bfloat16\" or "
                                              "\"float32\"");
            *fields[i] = (d == "bf16" || d == "bfloat16") ? "bfloat16" : "float32";
        }
        mp->finish();
    } else if (c.mixed_precision == ACCEL_MIXED_PRECISION_BF16) {
        // Accelerate's FullyShardedDataParallelPlugin.set_mixed_precision("bf16"): a policy of bfloat16
        // parameters, reductions and buffers when none is given.
        s.param_dtype = s.reduce_dtype = s.buffer_dtype = "bfloat16";
    }
    if (s.param_dtype != "float32" && c.mixed_precision == ACCEL_MIXED_PRECISION_FP8)
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("mixed_precision_policy") + ": bfloat16 parameters together with "
                                      "mixed_precision \"fp8\" are not yet supported by accel; use \"float32\"");
    o.finish();
}

// A number, or "auto" (nullopt): DeepSpeed config values Accelerate fills in.
std::optional<double> number_or_auto(JsonObject &o, const char *key, double min)
{
    if (o.is_string(key)) {
        if (o.get_string(key, "auto") != "auto")
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": expected a number or \"auto\"");
        return std::nullopt;
    }
    if (!o.has(key)) {
        o.get_optional_string(key); // null: as absent
        return std::nullopt;
    }
    return o.get_double(key, 0.0, min, 1e300);
}

// An offload device's folder: needed by "nvme", meaningless otherwise.
void check_nvme_path(const std::string &device, const std::string &path, const std::string &path_key, const char *what)
{
    if (device == "nvme" && path.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, path_key + ": the \"nvme\" offload device needs the folder to keep " + what + " in");
    if (device != "nvme" && !path.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, path_key + ": a path is only used with the \"nvme\" offload device (got \"" +
                                         device + "\")");
}

// hf_ds_config.optimizer: {"type": ..., "params": {...}} with DeepSpeed's names. Adam / AdamW (DeepSpeed's
// FusedAdam / CPUAdam: decoupled weight decay unless Adam's adam_w_mode is false, weight_decay 0 by default)
// and Adagrad are DeepSpeed's own; other names are torch.optim classes, as DeepSpeed falls back to them. The
// params are read as accel's optimizer config (same ranges, same messages, under this block's path).
ShardingConfig::DeepSpeedOptimizer parse_ds_optimizer(JsonObject &block)
{
    ShardingConfig::DeepSpeedOptimizer out;
    out.key = block.path();
    const std::string type = block.get_string("type", "");
    std::string lower = type;
    for (char &ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    auto params = block.get_object("params");
    block.finish();
    std::unique_ptr<cJSON, decltype(&cJSON_Delete)> p(params ? cJSON_Duplicate(params->node(), true) : cJSON_CreateObject(),
                                                      cJSON_Delete);
    std::string mine;
    if (lower == "adam" || lower == "adamw") {
        bool adam_w = true;
        if (const cJSON *m = cJSON_GetObjectItemCaseSensitive(p.get(), "adam_w_mode")) {
            if (!cJSON_IsBool(m)) type_error(params->path_of("adam_w_mode"), "true or false", m);
            adam_w = lower == "adamw" || cJSON_IsTrue(m); // DeepSpeed's AdamW is always decoupled
        }
        if (const cJSON *b = cJSON_GetObjectItemCaseSensitive(p.get(), "bias_correction"); b != nullptr && !cJSON_IsTrue(b))
            fail(ACCEL_ERR_UNIMPLEMENTED, params->path_of("bias_correction") + ": only true (DeepSpeed's default) is supported");
        for (const char *k : {"adam_w_mode", "torch_adam", "bias_correction", "fused", "foreach"}) // performance switches
            cJSON_DeleteItemFromObjectCaseSensitive(p.get(), k);
        mine = adam_w ? "adamw" : "adam";
        if (adam_w && cJSON_GetObjectItemCaseSensitive(p.get(), "weight_decay") == nullptr)
            cJSON_AddNumberToObject(p.get(), "weight_decay", 0.0); // FusedAdam's default, not torch AdamW's 0.01
    } else if (lower == "adagrad") {
        mine = "adagrad";
    } else if (type == "SGD" || type == "RMSprop") {
        mine = lower;
    } else if (lower == "lamb" || lower == "onebitadam" || lower == "zerooneadam" || lower == "onebitlamb" ||
               lower == "lion" || lower == "muadam" || lower == "muadamw" || lower == "musgd") {
        fail(ACCEL_ERR_UNIMPLEMENTED, block.path_of("type") + ": DeepSpeed's \"" + type + "\" is not supported by accel "
                                      "(Adam, AdamW, Adagrad, SGD and RMSprop are)");
    } else {
        fail(ACCEL_ERR_INVALID_ARGUMENT, block.path_of("type") + ": expected \"Adam\", \"AdamW\", \"Adagrad\", \"SGD\" or "
                                         "\"RMSprop\", got \"" + type + "\"");
    }
    // "auto": Accelerate fills lr and weight_decay from the DummyOptim, nothing else.
    for (const char *k : {"lr", "weight_decay"}) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(p.get(), k);
        if (v == nullptr || !cJSON_IsString(v)) continue;
        if (std::string(v->valuestring) != "auto")
            fail(ACCEL_ERR_INVALID_ARGUMENT, params->path_of(k) + ": expected a number or \"auto\"");
        (std::string(k) == "lr" ? out.auto_lr : out.auto_weight_decay) = true;
        cJSON_DeleteItemFromObjectCaseSensitive(p.get(), k);
    }
    for (const cJSON *e = p->child; e != nullptr; e = e->next)
        if (cJSON_IsString(e) && std::string(e->valuestring) == "auto")
            fail(ACCEL_ERR_INVALID_ARGUMENT, params->path_of(e->string) + ": \"auto\" is filled only for lr and weight_decay "
                                             "(from the DummyOptim); give a number");
    cJSON_AddStringToObject(p.get(), "type", mine.c_str());
    std::unique_ptr<char, decltype(&cJSON_free)> text(cJSON_PrintUnformatted(p.get()), cJSON_free);
    try {
        out.config = parse_optimizer_config(text.get());
    } catch (const Error &e) {
        const std::string where = params ? params->path() : block.path() + ".params";
        fail(e.code(), where + "." + e.what());
    }
    return out;
}

// hf_ds_config.scheduler: DeepSpeed's WarmupLR, WarmupDecayLR and WarmupCosineLR with their defaults.
ShardingConfig::DeepSpeedScheduler parse_ds_scheduler(JsonObject &block)
{
    ShardingConfig::DeepSpeedScheduler out;
    out.key = block.path();
    SchedulerConfig &c = out.config;
    c.type = block.get_string("type", "");
    if (c.type == "OneCycle" || c.type == "LRRangeTest")
        fail(ACCEL_ERR_UNIMPLEMENTED, block.path_of("type") + ": DeepSpeed's \"" + c.type + "\" is not supported by accel "
                                      "(WarmupLR, WarmupDecayLR and WarmupCosineLR are)");
    if (!c.deepspeed())
        fail(ACCEL_ERR_INVALID_ARGUMENT, block.path_of("type") + ": expected \"WarmupLR\", \"WarmupDecayLR\" or "
                                         "\"WarmupCosineLR\", got \"" + c.type + "\"");
    auto params = block.get_object("params");
    block.finish();
    if (!params) {
        if (c.type != "WarmupLR")
            fail(ACCEL_ERR_INVALID_ARGUMENT, block.path_of("params") + ": required (total_num_steps)");
        c.num_warmup_steps = 1000;
        out.auto_max_lr = true; // WarmupLR's warmup_max_lr=None: the optimizer's lr
        return out;
    }
    JsonObject &o = *params;
    auto number = [&](const char *key, double def, bool *automatic) {
        if (o.is_string(key)) {
            if (automatic == nullptr || o.get_string(key, "") != "auto")
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + (automatic ? ": expected a number or \"auto\"" : ": expected a number"));
            *automatic = true;
            return def;
        }
        if (cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(o.node(), key)))
            fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of(key) + ": one value per parameter group is not supported by accel; give one number");
        return o.get_double(key, def, 0.0, INFINITY);
    };
    auto steps = [&](const char *key, int64_t def, bool *automatic) {
        if (o.is_string(key)) {
            if (o.get_string(key, "") != "auto") fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": expected an integer or \"auto\"");
            *automatic = true;
            return def;
        }
        return o.get_int(key, def, 1, INT64_MAX);
    };
    c.num_warmup_steps = steps("warmup_num_steps", 1000, &out.auto_warmup);
    c.log_warmup = o.get_enum("warmup_type", "log", {"log", "linear"}) == "log";
    if (c.type == "WarmupCosineLR") {
        c.warmup_min_ratio = number("warmup_min_ratio", 0.0, nullptr);
        c.cos_min_ratio = number("cos_min_ratio", 1e-4, nullptr);
    } else {
        c.warmup_min_lr = number("warmup_min_lr", 0.0, &out.auto_min_lr);
        // WarmupLR: None = the optimizer's lr; WarmupDecayLR: 0.001
        const bool has_max = o.has("warmup_max_lr");
        c.warmup_max_lr = number("warmup_max_lr", 1e-3, &out.auto_max_lr);
        if (!has_max && c.type == "WarmupLR") out.auto_max_lr = true;
    }
    if (c.type != "WarmupLR") {
        if (!o.has("total_num_steps")) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("total_num_steps") + ": required for " + c.type);
        c.num_training_steps = steps("total_num_steps", 0, &out.auto_total);
    }
    o.finish();
    return out;
}

// deepspeed_plugin.hf_ds_config: a DeepSpeed JSON config (object or file), with DeepSpeed's key names. Its
// values win over the plugin's, which only fill "auto" (Accelerate's rule); the batch-size triangle
// train_batch_size = micro × gradient_accumulation_steps × processes is checked when it is fully given.

// The fp16 block's loss-scaler keys (DeepSpeed's defaults, and its quirk: when none of the dynamic keys is
// given, the ZeRO optimizers fall back to the scaler class's defaults: 2^32, hysteresis 1).
DeepSpeedLossScale parse_deepspeed_fp16(JsonObject &fp16)
{
    DeepSpeedLossScale d;
    bool spelled = false;
    for (const char *k : {"initial_scale_power", "loss_scale_window", "min_loss_scale", "hysteresis",
                          "consecutive_hysteresis"})
        spelled = spelled || fp16.has(k);
    if (spelled) {
        d.initial_scale = 65536.0;
        d.hysteresis = 2;
    }
    d.loss_scale = fp16.get_double("loss_scale", 0.0, 0.0, 1e38);
    if (fp16.has("initial_scale_power"))
        d.initial_scale = std::ldexp(1.0, static_cast<int>(fp16.get_int("initial_scale_power", 16, 0, 127)));
    d.loss_scale_window = fp16.get_int("loss_scale_window", d.loss_scale_window, 1, INT32_MAX);
    d.hysteresis = fp16.get_int("hysteresis", d.hysteresis, 1, INT32_MAX);
    d.consecutive_hysteresis = fp16.get_bool("consecutive_hysteresis", false);
    d.min_loss_scale = fp16.get_double("min_loss_scale", 1.0, 0.0, 1e38, true);
    // auto_cast true (what Accelerate writes) is the Accelerator's autocast; false would run fp16 weights
    // without autocast, which accel does not do.
    if (fp16.has("auto_cast") && !fp16.get_bool("auto_cast", true))
        fail(ACCEL_ERR_UNIMPLEMENTED, fp16.path_of("auto_cast") + ": false (fp16 weights without autocast) is not "
                                      "supported by accel; use true or leave it out");
    if (d.loss_scale == 0.0 && d.min_loss_scale > d.initial_scale)
        fail(ACCEL_ERR_INVALID_ARGUMENT, fp16.path_of("min_loss_scale") + ": " + std::to_string(d.min_loss_scale) +
                                             " is above the initial scale " + std::to_string(d.initial_scale));
    return d;
}

void parse_ds_json(JsonObject &plugin, AcceleratorConfig &c)
{
    ShardingConfig &s = c.sharding;
    std::string where = plugin.path_of("hf_ds_config");
    std::unique_ptr<JsonDocument> doc;
    const cJSON *node = nullptr;
    if (plugin.is_string("hf_ds_config")) {
        std::string path = plugin.get_string("hf_ds_config", "");
        std::ifstream in(path, std::ios::binary);
        if (!in) fail(ACCEL_ERR_NOT_FOUND, where + ": cannot read the DeepSpeed config file \"" + path + "\"");
        std::ostringstream ss;
        ss << in.rdbuf();
        where += " (" + path + ")";
        doc = std::make_unique<JsonDocument>(ss.str().c_str(), where);
        node = doc->root();
    } else {
        node = plugin.get_object("hf_ds_config")->node();
    }
    JsonObject ds(node, where);
    auto zero = ds.get_object("zero_optimization");
    if (!zero) {
        // A misspelled section name ("zero_optimisation") would otherwise read as a missing section.
        std::string near;
        for (const cJSON *k = node->child; k != nullptr; k = k->next)
            if (k->string != nullptr && std::string(k->string).rfind("zero_", 0) == 0 &&
                std::string(k->string) != "zero_allow_untested_optimizer")
                near += (near.empty() ? "" : ", ") + std::string("\"") + k->string + "\"";
        fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": a DeepSpeed config must have a zero_optimization section" +
                                             (near.empty() ? "" : " (it has " + near + ": misspelled?)"));
    }
    if (zero->is_string("stage")) number_or_auto(*zero, "stage", 0); // "auto": the plugin's zero_stage
    else s.zero_stage = zero->get_int("stage", 0, 0, 3);              // DeepSpeed's default is 0
    for (const std::string key : {"offload_optimizer", "offload_param"})
        if (auto off = zero->get_object(key.c_str())) {
            std::string d = off->get_enum("device", "none", {"none", "cpu", "nvme"});
            off->get_bool("pin_memory", false); // page-locked host memory for GPU copies: nothing to lock in a CPU build
            auto path = off->get_optional_string("nvme_path");
            if (key == "offload_optimizer") {
                s.offload_optimizer_device = d;
                s.offload_optimizer_nvme_path = path.value_or("");
                s.offload_optimizer_nvme_path_key = off->path_of("nvme_path");
            } else {
                s.offload_param_device = d;
                s.offload_param_nvme_path = path.value_or("");
                s.offload_param_nvme_path_key = off->path_of("nvme_path");
                s.offload_param_device_key = off->path_of("device");
            }
            off->finish();
        }
    // DeepSpeed's bucket, prefetch and sub-group sizes (elements): checked against the model's units at
    // prepare (sharded_data_parallel.cpp), where the units are known.
    const std::pair<const char *, ShardingConfig::DeepSpeedSize *> sizes[] = {
        {"reduce_bucket_size", &s.reduce_bucket_size},
        {"allgather_bucket_size", &s.allgather_bucket_size},
        {"stage3_prefetch_bucket_size", &s.prefetch_bucket_size},
        {"stage3_param_persistence_threshold", &s.param_persistence_threshold},
        {"stage3_model_persistence_threshold", &s.model_persistence_threshold},
        {"stage3_max_live_parameters", &s.max_live_parameters},
        {"stage3_max_reuse_distance", &s.max_reuse_distance},
        {"sub_group_size", &s.sub_group_size}};
    for (const auto &[key, size] : sizes) {
        size->key = zero->path_of(key);
        size->automatic = zero->is_string(key); // number_or_auto accepts no other string
        if (auto v = number_or_auto(*zero, key, 0)) {
            if (*v != std::floor(*v) || *v > 9.0e18)
                fail(ACCEL_ERR_INVALID_ARGUMENT, zero->path_of(key) + ": expected a whole number of elements");
            size->value = static_cast<int64_t>(*v);
        }
    }
    if (s.sub_group_size.value == 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, s.sub_group_size.key + ": expected at least 1 element (a sub-group is stepped at once)");
    for (const char *key : {"contiguous_gradients", "overlap_comm", "reduce_scatter", "allgather_partitions"}) {
        const bool def = std::string(key) != "overlap_comm" || s.zero_stage == 3;
        if (zero->get_bool(key, def) != def)
            fail(ACCEL_ERR_UNIMPLEMENTED, zero->path_of(key) + ": only DeepSpeed's default (" + (def ? "true" : "false") +
                                          ") is supported by accel");
    }
    if (zero->is_string("stage3_gather_16bit_weights_on_model_save")) number_or_auto(*zero, "stage3_gather_16bit_weights_on_model_save", 0);
    else s.zero3_save_16bit_model = zero->get_bool("stage3_gather_16bit_weights_on_model_save", s.zero3_save_16bit_model);
    zero->finish();

    const int64_t world = c.topology.world_size;
    auto train = number_or_auto(ds, "train_batch_size", 1);
    auto micro = number_or_auto(ds, "train_micro_batch_size_per_gpu", 1);
    if (train && !micro) s.ds_train_batch_size_to_check = static_cast<int64_t>(*train);
    if (micro) {
        if (*micro != std::floor(*micro) || *micro < 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, ds.path_of("train_micro_batch_size_per_gpu") + ": expected an integer >= 1 or \"auto\"");
        s.ds_micro_batch_size_to_check = static_cast<int64_t>(*micro);
    }
    auto ga = number_or_auto(ds, "gradient_accumulation_steps", 1);
    if (ga) {
        if (*ga != static_cast<double>(static_cast<int64_t>(*ga)))
            fail(ACCEL_ERR_INVALID_ARGUMENT, ds.path_of("gradient_accumulation_steps") + ": expected an integer");
        c.gradient_accumulation.num_steps = static_cast<int64_t>(*ga); // DeepSpeed's value wins
    }
    if (train && micro && ga && *train != *micro * *ga * static_cast<double>(world))
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             ds.path_of("train_batch_size") + ": " + std::to_string(static_cast<int64_t>(*train)) +
                 " is not train_micro_batch_size_per_gpu (" + std::to_string(static_cast<int64_t>(*micro)) +
                 ") x gradient_accumulation_steps (" + std::to_string(static_cast<int64_t>(*ga)) + ") x " +
                 std::to_string(world) + " process(es)");
    if (train && micro && !ga && std::fmod(*train, *micro * static_cast<double>(world)) != 0.0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, ds.path_of("train_batch_size") + ": " + std::to_string(static_cast<int64_t>(*train)) +
                                         " is not divisible by train_micro_batch_size_per_gpu x " +
                                         std::to_string(world) + " process(es)");
    if (train && micro && !ga)
        c.gradient_accumulation.num_steps = static_cast<int64_t>(*train / (*micro * static_cast<double>(world)));
    if (auto clip = number_or_auto(ds, "gradient_clipping", 0)) s.gradient_clipping = *clip;
    number_or_auto(ds, "steps_per_print", 0); // Accelerate overwrites it: DeepSpeed's logging is silent
    if (!ds.get_bool("zero_allow_untested_optimizer", true))
        fail(ACCEL_ERR_UNIMPLEMENTED, ds.path_of("zero_allow_untested_optimizer") + ": accel always steps LibTorch's "
                                      "optimizers (Accelerate sets true); false is not supported");
    if (ds.get_bool("wall_clock_breakdown", false))
        fail(ACCEL_ERR_UNIMPLEMENTED, ds.path_of("wall_clock_breakdown") + ": DeepSpeed's timers are not supported by accel");
    for (const char *key : {"fp16", "bf16"})
        if (auto mp = ds.get_object(key)) {
            bool on = false;
            if (mp->is_string("enabled")) number_or_auto(*mp, "enabled", 0); // "auto": the Accelerator's choice
            else on = mp->get_bool("enabled", false);
            const bool fp16 = std::string(key) == "fp16";
            const auto want = fp16 ? ACCEL_MIXED_PRECISION_FP16 : ACCEL_MIXED_PRECISION_BF16;
            if (on && c.mixed_precision != want)
                fail(ACCEL_ERR_INVALID_ARGUMENT, mp->path_of("enabled") + ": the DeepSpeed config enables " + key +
                                                 " but mixed_precision is \"" + mixed_precision_name(c.mixed_precision) +
                                                 "\"; make them agree");
            if (fp16) c.grad_scaler.deepspeed = parse_deepspeed_fp16(*mp);
            mp->finish();
        }
    if (auto block = ds.get_object("optimizer")) s.ds_optimizer = parse_ds_optimizer(*block);
    if (auto block = ds.get_object("scheduler")) s.ds_scheduler = parse_ds_scheduler(*block);
    ds.finish();
}

void parse_deepspeed(JsonObject &o, AcceleratorConfig &c)
{
    ShardingConfig &s = c.sharding;
    s.frontend = "deepspeed";
    int64_t def_stage = 2;
    if (auto v = env_string("ACCELERATE_DEEPSPEED_ZERO_STAGE")) {
        char *end = nullptr;
        long x = std::strtol(v->c_str(), &end, 10);
        if (end == v->c_str() || *end != '\0' || x < 0 || x > 3)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable ACCELERATE_DEEPSPEED_ZERO_STAGE: expected 0, 1, 2 "
                                             "or 3, got \"" + *v + "\"");
        def_stage = x;
    }
    s.zero_stage = o.get_int("zero_stage", def_stage, 0, 3);
    s.sync_module_states = true; // DeepSpeed's engine broadcasts the model when it is built

    // gradient_accumulation_steps: "auto" = the Accelerator's; a number wins over it (DeepSpeed's value wins).
    if (o.is_string("gradient_accumulation_steps")) {
        if (o.get_string("gradient_accumulation_steps", "auto") != "auto")
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("gradient_accumulation_steps") + ": expected an integer >= 1 "
                                             "or \"auto\"");
    } else if (o.has("gradient_accumulation_steps")) {
        // On a mismatch with the Accelerator's value DeepSpeed's wins (Accelerate's rule).
        int64_t ga = o.get_int("gradient_accumulation_steps", 1, 1, INT32_MAX);
        c.gradient_accumulation.num_steps = ga;
    }
    // gradient_clipping: DeepSpeed clips inside its step; "auto" (the default) = no clipping.
    if (o.is_string("gradient_clipping")) {
        if (o.get_string("gradient_clipping", "auto") != "auto")
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("gradient_clipping") + ": expected a number >= 0 or \"auto\"");
    } else {
        double def = 0.0;
        if (auto v = env_string("ACCELERATE_GRADIENT_CLIPPING")) {
            char *end = nullptr;
            def = std::strtod(v->c_str(), &end);
            if (end == v->c_str() || *end != '\0' || !(def >= 0.0))
                fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable ACCELERATE_GRADIENT_CLIPPING: expected a number "
                                                 ">= 0, got \"" + *v + "\"");
        }
        s.gradient_clipping = o.get_double("gradient_clipping", def, 0.0, 1e300);
    }
    s.offload_optimizer_device = o.get_enum("offload_optimizer_device", "none", {"none", "cpu", "nvme"});
    s.offload_param_device = o.get_enum("offload_param_device", "none", {"none", "cpu", "nvme"});
    s.offload_param_device_key = o.path_of("offload_param_device");
    if (std::string p = o.get_string("offload_optimizer_nvme_path", "none"); p != "none") {
        if (s.offload_optimizer_device != "nvme")
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("offload_optimizer_nvme_path") + ": a path is only used with "
                                             "offload_optimizer_device \"nvme\" (got \"" + s.offload_optimizer_device + "\")");
        s.offload_optimizer_nvme_path = p;
    }
    s.offload_optimizer_nvme_path_key = o.path_of("offload_optimizer_nvme_path");
    if (std::string p = o.get_string("offload_param_nvme_path", "none"); p != "none") s.offload_param_nvme_path = p;
    s.offload_param_nvme_path_key = o.path_of("offload_param_nvme_path");
    s.zero3_init_flag = o.get_bool("zero3_init_flag", false);
    s.zero3_save_16bit_model = o.get_bool("zero3_save_16bit_model", false);
    if (o.has("hf_ds_config")) parse_ds_json(o, c);
    // Building partitioned only means something when the parameters stay partitioned (Accelerate turns the
    // flag off with a warning below stage 3; accel says so instead of ignoring it).
    if (s.zero3_init_flag && s.zero_stage != 3)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("zero3_init_flag") + ": true applies to ZeRO stage 3 only (zero_stage "
                                         "is " + std::to_string(s.zero_stage) + ")");
    // fp16 without an fp16 block: Accelerate adds {"enabled": true, "auto_cast": true}, and ZeRO's scaler
    // takes its class defaults (DeepSpeedLossScale's).
    if (c.mixed_precision == ACCEL_MIXED_PRECISION_FP16 && !c.grad_scaler.deepspeed) c.grad_scaler.deepspeed = DeepSpeedLossScale{};
    // bf16 ("bf16": {"enabled": true}): DeepSpeed casts the module to bfloat16 and keeps float32 master
    // partitions; its gradients are reduced in the model's dtype.
    if (c.mixed_precision == ACCEL_MIXED_PRECISION_BF16) s.param_dtype = s.reduce_dtype = s.buffer_dtype = "bfloat16";
    if (s.offload_optimizer_device != "none" && s.zero_stage < 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("offload_optimizer_device") + ": \"" + s.offload_optimizer_device +
                                         "\" offloads the partitioned optimizer state of ZeRO stages 1-3; zero_stage is 0");
    check_nvme_path(s.offload_optimizer_device, s.offload_optimizer_nvme_path, s.offload_optimizer_nvme_path_key,
                    "the optimizer state");
    // DeepSpeed offloads parameters only at stage 3 (the partitioned parameters of ZeRO-3).
    if (s.offload_param_device != "none" && s.zero_stage < 3)
        fail(ACCEL_ERR_INVALID_ARGUMENT, s.offload_param_device_key + ": \"" + s.offload_param_device + "\" offloads "
                                         "the partitioned parameters of ZeRO stage 3; zero_stage is " +
                                         std::to_string(s.zero_stage));
    check_nvme_path(s.offload_param_device, s.offload_param_nvme_path, s.offload_param_nvme_path_key,
                    "the parameter shards");
    s.strategy = "ZERO_" + std::to_string(s.zero_stage);
    s.shard_optimizer = s.zero_stage >= 1;
    s.shard_gradients = s.zero_stage >= 2;
    s.shard_parameters = s.reshard_after_forward = s.zero_stage >= 3;
    // DeepSpeed's granularity: parameters gathered and gradients reduced layer by layer, and ZeRO-3 prefetches
    // the next module's parameters (its stage3_prefetch_bucket_size) in forward and backward.
    s.wrap_every_layer = true;
    // stage3_prefetch_bucket_size 0: DeepSpeed fetches nothing ahead.
    const bool prefetch = s.zero_stage >= 3 && s.prefetch_bucket_size.value != 0;
    s.forward_prefetch = prefetch;
    s.backward_prefetch = prefetch ? "BACKWARD_PRE" : "NO_PREFETCH";
    o.finish();
}

} // namespace

// MegatronLMPlugin's use_distributed_optimizer without tp or pp (config/megatron_lm_plugin.cpp): the optimizer
// state sharded over every process, as deepspeed_plugin {"zero_stage": 1} does. `path` names it in messages.
void use_deepspeed_zero_stage_1(AcceleratorConfig &c, const std::string &path)
{
    std::unique_ptr<cJSON, void (*)(cJSON *)> obj(cJSON_CreateObject(), cJSON_Delete);
    if (!obj || cJSON_AddNumberToObject(obj.get(), "zero_stage", 1) == nullptr)
        fail(ACCEL_ERR_RESOURCE_EXHAUSTED, path + ": out of memory");
    JsonObject o(obj.get(), path);
    parse_deepspeed(o, c);
}

// Called by parse_accelerator_config after gradient accumulation is known.
void parse_sharding_plugins(JsonObject &root, AcceleratorConfig &c)
{
    const bool fsdp_json = root.has("fsdp_plugin"), ds_json = root.has("deepspeed_plugin");
    root.get_object("fsdp_plugin"); // mark null values as seen
    root.get_object("deepspeed_plugin");
    const bool fsdp_env = !fsdp_json && !ds_json && env_truthy("ACCELERATE_USE_FSDP");
    const bool ds_env = !fsdp_json && !ds_json && env_truthy("ACCELERATE_USE_DEEPSPEED");
    if ((fsdp_json && ds_json) || (fsdp_env && ds_env))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "fsdp_plugin: cannot be combined with deepspeed_plugin; choose one");
    // The JSON plugin wins over what `accel launch --use_fsdp / --use_deepspeed` exported (Accelerate's
    // precedence: the object passed to the Accelerator); said, since the launch line asked for the other engine.
    const char *other = fsdp_json ? "ACCELERATE_USE_DEEPSPEED" : ds_json ? "ACCELERATE_USE_FSDP" : nullptr;
    if (other != nullptr && env_truthy(other) && c.topology.rank == 0)
        logging::log_as(ACCEL_LOG_WARNING, 0, c.topology.world_size,
                        logging::printf_string("%s is set (accel launch --use_%s) but the accelerator's JSON config "
                                               "has %s, which wins: training runs %s",
                                               other, fsdp_json ? "deepspeed" : "fsdp",
                                               fsdp_json ? "fsdp_plugin" : "deepspeed_plugin",
                                               fsdp_json ? "FSDP" : "DeepSpeed ZeRO"));
    if (fsdp_json) {
        auto o = root.get_object("fsdp_plugin");
        parse_fsdp(*o, c);
    } else if (ds_json) {
        auto o = root.get_object("deepspeed_plugin");
        parse_deepspeed(*o, c);
    } else if (fsdp_env) {
        auto obj = object_from_env({{"FSDP_VERSION", "fsdp_version", "int"},
                                    {"FSDP_OFFLOAD_PARAMS", "cpu_offload", "bool"},
                                    {"FSDP_AUTO_WRAP_POLICY", "auto_wrap_policy", "string"},
                                    {"FSDP_TRANSFORMER_CLS_TO_WRAP", "transformer_cls_names_to_wrap", "list"},
                                    {"FSDP_BACKWARD_PREFETCH", "backward_prefetch", "string"},
                                    {"FSDP_STATE_DICT_TYPE", "state_dict_type", "string"},
                                    {"FSDP_FORWARD_PREFETCH", "forward_prefetch", "bool"},
                                    {"FSDP_USE_ORIG_PARAMS", "use_orig_params", "bool"},
                                    {"FSDP_CPU_RAM_EFFICIENT_LOADING", "cpu_ram_efficient_loading", "bool"},
                                    {"FSDP_SYNC_MODULE_STATES", "sync_module_states", "bool"},
                                    {"FSDP_ACTIVATION_CHECKPOINTING", "activation_checkpointing", "bool"},
                                    {"FSDP_IGNORED_MODULES", "ignored_modules", "string"}});
        add_launcher_defaults_from_env(obj.get());
        JsonObject o(obj.get(), "FSDP_* environment variables: fsdp_plugin");
        parse_fsdp(o, c);
    } else if (ds_env) {
        auto obj = object_from_env({{"ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "offload_optimizer_device", "string"},
                                    {"ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "offload_param_device", "string"},
                                    {"ACCELERATE_DEEPSPEED_ZERO3_INIT", "zero3_init_flag", "bool"},
                                    {"ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "zero3_save_16bit_model", "bool"},
                                    {"ACCELERATE_DEEPSPEED_CONFIG_FILE", "hf_ds_config", "string"}});
        // "none" is no file: the questionnaire's default answer, which Accelerate's launcher exports as it is
        // and its DeepSpeedPlugin reads as no file.
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(obj.get(), "hf_ds_config");
        if (file != nullptr && std::string(file->valuestring) == "none")
            cJSON_DeleteItemFromObjectCaseSensitive(obj.get(), "hf_ds_config");
        JsonObject o(obj.get(), "ACCELERATE_DEEPSPEED_* environment variables: deepspeed_plugin");
        parse_deepspeed(o, c);
    }
}

void write_sharding(JsonWriter &w, const ShardingConfig &s)
{
    if (s.frontend != "fsdp") w.add_null("fsdp_plugin");
    if (s.frontend != "deepspeed") w.add_null("deepspeed_plugin");
    if (s.frontend == "fsdp") {
        // Written so that it parses back to the same configuration.
        w.begin_object("fsdp_plugin").add("fsdp_version", s.fsdp_version);
        if (s.fsdp_version == 2) w.add("reshard_after_forward", s.reshard_after_forward);
        else w.add("sharding_strategy", s.strategy);
        w.add("auto_wrap_policy", s.auto_wrap_policy);
        if (s.auto_wrap_policy == "TRANSFORMER_BASED_WRAP") w.add("transformer_cls_names_to_wrap", s.wrap_classes);
        if (s.auto_wrap_policy == "SIZE_BASED_WRAP") w.add("min_num_params", s.min_num_params);
        w.add("state_dict_type", s.state_dict_type);
        w.begin_object("mixed_precision_policy")
            .add("param_dtype", s.param_dtype)
            .add("reduce_dtype", s.reduce_dtype)
            .add("buffer_dtype", s.buffer_dtype)
            .end_object();
        w.add("cpu_offload", s.offload_param_device == "cpu")
            .add("forward_prefetch", s.forward_prefetch)
            .add("backward_prefetch", s.backward_prefetch)
            .add("limit_all_gathers", s.limit_all_gathers)
            .add("sync_module_states", s.sync_module_states)
            .add("use_orig_params", s.use_orig_params)
            .add("activation_checkpointing", s.activation_checkpointing)
            .end_object();
    } else if (s.frontend == "deepspeed") {
        w.begin_object("deepspeed_plugin")
            .add("zero_stage", s.zero_stage)
            .add("gradient_clipping", s.gradient_clipping)
            .add("offload_optimizer_device", s.offload_optimizer_device)
            .add("offload_param_device", s.offload_param_device);
        if (!s.offload_optimizer_nvme_path.empty()) w.add("offload_optimizer_nvme_path", s.offload_optimizer_nvme_path);
        if (!s.offload_param_nvme_path.empty()) w.add("offload_param_nvme_path", s.offload_param_nvme_path);
        w.add("zero3_init_flag", s.zero3_init_flag).add("zero3_save_16bit_model", s.zero3_save_16bit_model).end_object();
    }
}

} // namespace accel::config
