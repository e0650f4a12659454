#include "config/accelerator_config.hpp"

#include "common/error.hpp"
#include "config/env.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <cmath>
#include <cstdlib>

namespace accel::config {

namespace {

constexpr const char *kNotYet = "not yet supported by accel";

accel_mixed_precision_t parse_mixed_precision(const std::string &path, const std::string &v)
{
    if (v == "no") return ACCEL_MIXED_PRECISION_NO;
    if (v == "bf16") return ACCEL_MIXED_PRECISION_BF16;
    if (v == "fp16")
        fail(ACCEL_ERR_UNIMPLEMENTED, path + ": \"fp16\" (autocast with a dynamic loss scaler) is not yet supported by "
                                             "accel; use \"bf16\" or \"no\"");
    if (v == "fp8")
        fail(ACCEL_ERR_UNIMPLEMENTED, path + ": \"fp8\" is not yet supported by accel; use \"bf16\" or \"no\"");
    fail(ACCEL_ERR_INVALID_ARGUMENT, path + ": expected one of \"no\", \"fp16\", \"bf16\", \"fp8\", got \"" + v + "\"");
}

bool env_flag(const char *name, bool def)
{
    auto v = env_string(name);
    if (!v) return def;
    if (*v == "1" || *v == "true" || *v == "True" || *v == "yes") return true;
    if (*v == "0" || *v == "false" || *v == "False" || *v == "no") return false;
    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected true or false, got \"" +
                                         *v + "\"");
}

// A kwargs handler or plugin section whose fields are validated but only their defaults are supported yet.
// `check` reads every field with its default and returns the first key holding another value, or "".
template <class Check>
void only_defaults(JsonObject &parent, const char *key, const std::string &feature, Check check)
{
    auto obj = parent.get_object(key);
    if (!obj) return;
    std::string changed = check(*obj);
    obj->finish();
    if (!changed.empty())
        fail(ACCEL_ERR_UNIMPLEMENTED, obj->path_of(changed.c_str()) + ": " + feature + " is " + kNotYet +
                                          "; only the default value is accepted");
}

void parse_kwargs_handlers(JsonObject &root, AcceleratorConfig &c)
{
    auto kw = root.get_object("kwargs_handlers");
    if (!kw) return;
    if (auto ac = kw->get_object("autocast")) {
        c.autocast.enabled = ac->get_bool("enabled", true);
        c.autocast.cache_enabled = ac->get_bool("cache_enabled", true);
        ac->finish();
    }
    only_defaults(*kw, "ddp", "DistributedDataParallelKwargs (multi-process training)", [](JsonObject &o) {
        std::string changed;
        auto note = [&](bool differs, const char *k) { if (differs && changed.empty()) changed = k; };
        note(o.get_int("dim", 0, 0, 64) != 0, "dim");
        note(!o.get_bool("broadcast_buffers", true), "broadcast_buffers");
        note(o.get_int("bucket_cap_mb", 25, 1, 1 << 20) != 25, "bucket_cap_mb");
        note(o.get_bool("find_unused_parameters", false), "find_unused_parameters");
        note(o.get_bool("check_reduction", false), "check_reduction");
        note(o.get_bool("gradient_as_bucket_view", false), "gradient_as_bucket_view");
        note(o.get_bool("static_graph", false), "static_graph");
        note(o.get_enum("comm_hook", "no", {"no", "fp16", "bf16", "power_sgd", "batched_power_sgd"}) != "no", "comm_hook");
        note(o.get_enum("comm_wrapper", "no", {"no", "fp16", "bf16"}) != "no", "comm_wrapper");
        if (auto st = o.get_object("comm_state_option")) { st->finish(); }
        return changed;
    });
    only_defaults(*kw, "grad_scaler", "GradScalerKwargs (fp16 loss scaling)", [](JsonObject &o) {
        std::string changed;
        auto note = [&](bool differs, const char *k) { if (differs && changed.empty()) changed = k; };
        note(o.get_double("init_scale", 65536.0, 0.0, INFINITY, true) != 65536.0, "init_scale");
        note(o.get_double("growth_factor", 2.0, 1.0, INFINITY, true) != 2.0, "growth_factor");
        note(o.get_double("backoff_factor", 0.5, 0.0, 1.0, true) != 0.5 , "backoff_factor");
        note(o.get_int("growth_interval", 2000, 1, INT64_MAX) != 2000, "growth_interval");
        note(!o.get_bool("enabled", true), "enabled");
        return changed;
    });
    only_defaults(*kw, "init_process_group", "InitProcessGroupKwargs (multi-process training)", [](JsonObject &o) {
        std::string changed;
        if (o.get_optional_string("backend")) changed = "backend";
        if (o.get_optional_string("init_method") && changed.empty()) changed = "init_method";
        if (o.get_double("timeout", 1800.0, 0.0, INFINITY, true) != 1800.0 && changed.empty()) changed = "timeout";
        return changed;
    });
    kw->require_absent("fp8_recipe", "FP8RecipeKwargs is " + std::string(kNotYet));
    kw->require_absent("profile", "ProfileKwargs is " + std::string(kNotYet));
    kw->finish();
}

void parse_project_config(JsonObject &root)
{
    root.require_absent("project_dir", "project_dir (checkpointing) is " + std::string(kNotYet));
    only_defaults(root, "project_config", "ProjectConfiguration (checkpointing)", [](JsonObject &o) {
        std::string changed;
        if (o.get_optional_string("project_dir")) changed = "project_dir";
        if (o.get_optional_string("logging_dir") && changed.empty()) changed = "logging_dir";
        if (o.get_bool("automatic_checkpoint_naming", false) && changed.empty()) changed = "automatic_checkpoint_naming";
        if (o.get_optional_int("total_limit", 0, INT64_MAX) && changed.empty()) changed = "total_limit";
        if (o.get_int("iteration", 0, 0, INT64_MAX) != 0 && changed.empty()) changed = "iteration";
        if (o.get_bool("save_on_each_node", false) && changed.empty()) changed = "save_on_each_node";
        return changed;
    });
}

void parse_dataloader_config(JsonObject &root, AcceleratorConfig &c, bool split_batches_arg)
{
    c.dataloader.split_batches = split_batches_arg;
    auto dl = root.get_object("dataloader_config");
    if (!dl) return;
    if (dl->has("split_batches")) c.dataloader.split_batches = dl->get_bool("split_batches", false);
    else dl->get_bool("split_batches", false);
    if (dl->has("dispatch_batches")) c.dataloader.dispatch_batches = dl->get_bool("dispatch_batches", false);
    else dl->get_bool("dispatch_batches", false);
    if (c.dataloader.dispatch_batches.value_or(false))
        fail(ACCEL_ERR_UNIMPLEMENTED, dl->path_of("dispatch_batches") + ": dispatching batches from the main process is " +
                                          kNotYet);
    c.dataloader.even_batches = dl->get_bool("even_batches", true);
    c.dataloader.use_seedable_sampler = dl->get_bool("use_seedable_sampler", false);
    if (auto s = dl->get_optional_int("data_seed", 0, INT64_MAX)) c.dataloader.data_seed = static_cast<uint64_t>(*s);
    c.dataloader.non_blocking = dl->get_bool("non_blocking", false);
    c.dataloader.use_stateful_dataloader = dl->get_bool("use_stateful_dataloader", false);
    if (c.dataloader.use_stateful_dataloader)
        fail(ACCEL_ERR_UNIMPLEMENTED, dl->path_of("use_stateful_dataloader") + ": torchdata's StatefulDataLoader has no "
                                                                                "LibTorch counterpart; accel loaders resume "
                                                                                "through skip_first_batches");
    dl->finish();
}

} // namespace

const char *mixed_precision_name(accel_mixed_precision_t mp)
{
    switch (mp) {
    case ACCEL_MIXED_PRECISION_FP16: return "fp16";
    case ACCEL_MIXED_PRECISION_BF16: return "bf16";
    case ACCEL_MIXED_PRECISION_FP8: return "fp8";
    default: return "no";
    }
}

AcceleratorConfig parse_accelerator_config(const char *json)
{
    AcceleratorConfig c;
    c.topology = topology_from_env();

    // Environment defaults (what `accel launch` / `accelerate launch` export); JSON overrides them.
    std::string mp = env_string("ACCELERATE_MIXED_PRECISION").value_or("no");
    int64_t ga_steps = 1;
    if (auto v = env_string("ACCELERATE_GRADIENT_ACCUMULATION_STEPS")) {
        char *end = nullptr;
        long long x = std::strtoll(v->c_str(), &end, 10);
        if (end == v->c_str() || *end != '\0' || x < 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT,
                 "environment variable ACCELERATE_GRADIENT_ACCUMULATION_STEPS: expected an integer >= 1, got \"" + *v + "\"");
        ga_steps = x;
    }
    c.cpu = env_flag("ACCELERATE_USE_CPU", false);
    c.malloc_tuning = env_flag("ACCEL_MALLOC_TUNING", true);

    JsonDocument doc(json == nullptr ? "{}" : json, "config_json");
    JsonObject root(doc.root(), "");

    c.device_placement = root.get_bool("device_placement", true);
    bool split_batches = root.get_bool("split_batches", false);
    c.cpu = root.get_bool("cpu", c.cpu);
    if (auto v = root.get_optional_string("mixed_precision")) mp = *v;
    c.mixed_precision = parse_mixed_precision(root.path_of("mixed_precision"), mp);

    bool ga_given = root.has("gradient_accumulation_steps");
    ga_steps = root.get_int("gradient_accumulation_steps", ga_steps, 1, INT32_MAX);
    c.gradient_accumulation.num_steps = ga_steps;
    if (auto plugin = root.get_object("gradient_accumulation_plugin")) {
        if (ga_given && ga_steps != 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "gradient_accumulation_plugin: give either gradient_accumulation_steps or "
                                             "gradient_accumulation_plugin, not both");
        auto &g = c.gradient_accumulation;
        g.num_steps = plugin->get_int("num_steps", ga_steps, 1, INT32_MAX);
        g.adjust_scheduler = plugin->get_bool("adjust_scheduler", true);
        g.sync_with_dataloader = plugin->get_bool("sync_with_dataloader", true);
        g.sync_each_batch = plugin->get_bool("sync_each_batch", false);
        plugin->finish();
    }

    parse_dataloader_config(root, c, split_batches);
    c.rng_types = root.get_string_array("rng_types", c.rng_types);
    {
        for (size_t i = 0; i < c.rng_types.size(); ++i) {
            const auto &t = c.rng_types[i];
            std::string p = root.path_of("rng_types") + "[" + std::to_string(i) + "]";
            if (t != "torch" && t != "generator" && t != "cuda" && t != "xla" && t != "npu" && t != "mlu" &&
                t != "xpu" && t != "hpu" && t != "musa" && t != "sdaa" && t != "neuron")
                fail(ACCEL_ERR_INVALID_ARGUMENT, p + ": expected one of \"torch\", \"generator\", \"cuda\", ..., got \"" +
                                                     t + "\"");
            if (t != "torch" && t != "generator")
                fail(ACCEL_ERR_UNIMPLEMENTED, p + ": the \"" + t + "\" generator does not exist in this CPU build");
        }
    }
    c.step_scheduler_with_optimizer = root.get_bool("step_scheduler_with_optimizer", true);

    parse_kwargs_handlers(root, c);
    parse_project_config(root);
    root.require_absent("deepspeed_plugin", "DeepSpeed (ZeRO sharding) is " + std::string(kNotYet));
    root.require_absent("fsdp_plugin", "FSDP sharding is " + std::string(kNotYet));
    root.require_absent("megatron_lm_plugin", "Megatron-LM parallelism is " + std::string(kNotYet));
    root.require_absent("parallelism_config", "ParallelismConfig (tensor/context parallel) is " + std::string(kNotYet));
    root.require_absent("dynamo_plugin", "torch.compile (dynamo) has no LibTorch counterpart; it is " + std::string(kNotYet));
    auto dynamo = root.get_optional_string("dynamo_backend");
    if (dynamo && *dynamo != "no" && *dynamo != "NO")
        fail(ACCEL_ERR_UNIMPLEMENTED, "dynamo_backend: torch.compile has no LibTorch counterpart; only \"no\" is accepted");
    if (root.has("log_with")) {
        auto v = root.get_string_array("log_with", {});
        if (!v.empty()) fail(ACCEL_ERR_UNIMPLEMENTED, "log_with: experiment trackers are " + std::string(kNotYet));
    }
    root.finish();

    if (c.topology.world_size > 1)
        fail(ACCEL_ERR_UNIMPLEMENTED, "environment: WORLD_SIZE=" + std::to_string(c.topology.world_size) +
                                          " asks for multi-process training, whose communication backends (gloo, mpi, "
                                          "nccl) are " + kNotYet + "; run a single process");
    return c;
}

std::string to_json(const AcceleratorConfig &c)
{
    JsonWriter w;
    w.add("device_placement", c.device_placement)
        .add("cpu", c.cpu)
        .add("split_batches", c.dataloader.split_batches)
        .add("mixed_precision", mixed_precision_name(c.mixed_precision))
        .add("gradient_accumulation_steps", c.gradient_accumulation.num_steps);
    w.begin_object("gradient_accumulation_plugin")
        .add("num_steps", c.gradient_accumulation.num_steps)
        .add("adjust_scheduler", c.gradient_accumulation.adjust_scheduler)
        .add("sync_with_dataloader", c.gradient_accumulation.sync_with_dataloader)
        .add("sync_each_batch", c.gradient_accumulation.sync_each_batch)
        .end_object();
    w.begin_object("dataloader_config")
        .add("split_batches", c.dataloader.split_batches)
        .add("even_batches", c.dataloader.even_batches)
        .add("use_seedable_sampler", c.dataloader.use_seedable_sampler)
        .add("non_blocking", c.dataloader.non_blocking)
        .add("use_stateful_dataloader", c.dataloader.use_stateful_dataloader);
    if (c.dataloader.dispatch_batches) w.add("dispatch_batches", *c.dataloader.dispatch_batches);
    else w.add_null("dispatch_batches");
    if (c.dataloader.data_seed) w.add("data_seed", static_cast<int64_t>(*c.dataloader.data_seed));
    else w.add_null("data_seed");
    w.end_object();
    w.add("rng_types", c.rng_types).add("step_scheduler_with_optimizer", c.step_scheduler_with_optimizer);
    w.begin_object("kwargs_handlers")
        .begin_object("autocast")
        .add("enabled", c.autocast.enabled)
        .add("cache_enabled", c.autocast.cache_enabled)
        .end_object()
        .end_object();
    w.add_null("project_config").add_null("deepspeed_plugin").add_null("fsdp_plugin");
    w.begin_object("process")
        .add("rank", static_cast<int64_t>(c.topology.rank))
        .add("world_size", static_cast<int64_t>(c.topology.world_size))
        .add("local_rank", static_cast<int64_t>(c.topology.local_rank))
        .add("local_world_size", static_cast<int64_t>(c.topology.local_world_size))
        .end_object();
    return w.str();
}

} // namespace accel::config
