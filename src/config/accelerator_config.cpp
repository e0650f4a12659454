#include "config/accelerator_config.hpp"

#include "common/error.hpp"
#include "config/dynamo.hpp"
#include "config/env.hpp"
#include "config/tracking_config.hpp"
#include "config/json.hpp"
#include "config/megatron_lm_plugin.hpp"
#include "config/profile_config.hpp"
#include "config/str_to_bool.hpp"

#include <torch/cuda.h>
#include <cjson/cJSON.h>

#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdlib>

namespace accel::config {

// sharding_config.cpp
void parse_sharding_plugins(JsonObject &root, AcceleratorConfig &c);
void write_sharding(JsonWriter &w, const ShardingConfig &s);
// parallelism_config.cpp (after the sharding plugins: its checks need them)
void parse_parallelism_config(JsonObject &root, AcceleratorConfig &c);

namespace {

constexpr const char *kNotYet = "not yet supported by accel";

// The backend an accelerator uses: dynamo_plugin.backend or dynamo_backend (not both, as Accelerate), else
// ACCELERATE_DYNAMO_BACKEND, else "NO"; the plugin's other fields are checked for type.
std::string parse_dynamo(JsonObject &root)
{
    std::string backend;
    if (auto plugin = root.get_object("dynamo_plugin")) {
        // TorchDynamoPlugin's fields: with "no" or "eager" nothing is compiled and "ofi" has no such settings, so mode,
        // fullgraph, dynamic, options and the rest change nothing (as in Accelerate with backend "no"); they are still
        // type-checked.
        if (auto b = plugin->get_optional_string("backend")) backend = check_dynamo_backend(*b, plugin->path_of("backend"));
        plugin->get_enum("mode", "default", {"default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"});
        plugin->get_bool("fullgraph", false);
        plugin->get_bool("dynamic", false);
        plugin->get_bool("disable", false);
        plugin->get_bool("use_regional_compilation", false);
        plugin->get_object("options"); // any object: the backend's own options
        plugin->finish();
    }
    if (auto json_backend = root.get_optional_string("dynamo_backend")) {
        if (root.has("dynamo_plugin"))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "dynamo_backend: give either dynamo_backend or dynamo_plugin, not both "
                                             "(as Accelerate)");
        backend = check_dynamo_backend(*json_backend, "dynamo_backend");
    }
    if (backend.empty()) {
        if (auto env = env_string("ACCELERATE_DYNAMO_BACKEND")) backend = check_dynamo_backend(*env, "ACCELERATE_DYNAMO_BACKEND");
    }
    return backend.empty() ? "NO" : backend;
}

accel_mixed_precision_t parse_mixed_precision(const std::string &path, const std::string &v)
{
    if (v == "no") return ACCEL_MIXED_PRECISION_NO;
    if (v == "bf16") return ACCEL_MIXED_PRECISION_BF16;
    // fp16 parses everywhere; whether the device has fp16 kernels is probed when the accelerator is created.
    if (v == "fp16") return ACCEL_MIXED_PRECISION_FP16;
    if (v == "fp8") return ACCEL_MIXED_PRECISION_FP8;
    fail(ACCEL_ERR_INVALID_ARGUMENT, path + ": expected one of \"no\", \"fp16\", \"bf16\", \"fp8\", got \"" + v + "\"");
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

std::string upper(std::string s)
{
    for (char &ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    return s;
}

// fp8_format as Accelerate accepts it (upper-cased). `where` is the JSON path or the environment variable.
std::string checked_fp8_format(const std::string &where, const std::string &value)
{
    std::string v = upper(value);
    if (v == "E4M3" || v == "HYBRID") return v;
    if (v == "E5M2")
        fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": \"E5M2\" alone is rejected by TransformerEngine's recipes (forward "
                                                 "tensors need E4M3); expected \"E4M3\" or \"HYBRID\", got \"" + value + "\"");
    fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected \"E4M3\" or \"HYBRID\", got \"" + value + "\"");
}

// ACCELERATE_FP8_* (what `accelerate launch --fp8_*` exports): defaults for FP8RecipeKwargs.
void fp8_recipe_from_env(FP8RecipeKwargs &r)
{
    auto int_env = [](const char *name, int64_t def, int64_t min, int64_t max) {
        auto v = env_string(name);
        if (!v) return def;
        char *end = nullptr;
        long long x = std::strtoll(v->c_str(), &end, 10);
        if (end == v->c_str() || *end != '\0' || x < min || x > max)
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected an integer in " +
                                                 std::to_string(min) + ".." + std::to_string(max) + ", got \"" + *v + "\"");
        return static_cast<int64_t>(x);
    };
    if (auto v = env_string("ACCELERATE_FP8_FORMAT")) r.fp8_format = checked_fp8_format("environment variable ACCELERATE_FP8_FORMAT", *v);
    r.margin = int_env("ACCELERATE_FP8_MARGIN", r.margin, 0, 127);
    r.interval = int_env("ACCELERATE_FP8_INTERVAL", r.interval, 1, INT32_MAX);
    r.amax_history_len = int_env("ACCELERATE_FP8_AMAX_HISTORY_LEN", r.amax_history_len, 1, 1 << 20);
    if (auto v = env_string("ACCELERATE_FP8_AMAX_COMPUTE_ALGO")) {
        if (*v != "max" && *v != "most_recent")
            fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable ACCELERATE_FP8_AMAX_COMPUTE_ALGO: expected \"max\" or "
                                             "\"most_recent\", got \"" + *v + "\"");
        r.amax_compute_algo = *v;
    }
    r.use_autocast_during_eval = env_bool("ACCELERATE_FP8_USE_AUTOCAST_DURING_EVAL", r.use_autocast_during_eval);
    r.override_linear_precision[0] = env_bool("ACCELERATE_FP8_OVERRIDE_FPROP", r.override_linear_precision[0]);
    r.override_linear_precision[1] = env_bool("ACCELERATE_FP8_OVERRIDE_DGRAD", r.override_linear_precision[1]);
    r.override_linear_precision[2] = env_bool("ACCELERATE_FP8_OVERRIDE_WGRAD", r.override_linear_precision[2]);
}

// kwargs_handlers.fp8_recipe: FP8RecipeKwargs / TERecipeKwargs fields. accel emulates TransformerEngine's
// delayed scaling, so only the "te" backend exists; MS-AMP and MXFP8 block scaling are not implemented.
void parse_fp8_recipe(JsonObject &o, FP8RecipeKwargs &r)
{
    if (auto b = o.get_optional_string("backend")) {
        std::string v = upper(*b);
        if (v == "MSAMP")
            fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("backend") + ": MS-AMP has no LibTorch counterpart; accel emulates "
                                                                 "TransformerEngine's delayed scaling (backend \"te\")");
        if (v != "TE") fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("backend") + ": expected \"te\" or \"msamp\", got \"" + *b + "\"");
        r.backend = "te";
    }
    // MS-AMP's optimisation level: accepted (Python configs carry it) and unused with the "te" backend.
    for (const char *key : {"opt_level", "optimization_level"}) o.get_enum(key, "O2", {"O1", "O2"});
    if (auto f = o.get_optional_string("fp8_format")) r.fp8_format = checked_fp8_format(o.path_of("fp8_format"), *f);
    r.margin = o.get_int("margin", r.margin, 0, 127);
    r.interval = o.get_int("interval", r.interval, 1, INT32_MAX);
    r.amax_history_len = o.get_int("amax_history_len", r.amax_history_len, 1, 1 << 20);
    r.amax_compute_algo = o.get_enum("amax_compute_algo", r.amax_compute_algo, {"max", "most_recent"});
    auto olp = o.get_bool_array("override_linear_precision",
                                {r.override_linear_precision[0], r.override_linear_precision[1],
                                 r.override_linear_precision[2]},
                                3);
    for (size_t i = 0; i < 3; ++i) r.override_linear_precision[i] = olp[i];
    r.use_autocast_during_eval = o.get_bool("use_autocast_during_eval", r.use_autocast_during_eval);
    if (o.get_bool("use_mxfp8_block_scaling", false))
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("use_mxfp8_block_scaling") + ": MXFP8 block scaling is " + kNotYet +
                                          "; only per-tensor delayed scaling is emulated");
    o.finish();
}

// kwargs_handlers.ddp: DistributedDataParallelKwargs, implemented by src/parallel/ddp.
void parse_ddp_kwargs(JsonObject &o, DistributedDataParallelKwargs &d)
{
    d.dim = o.get_int("dim", d.dim, 0, 64); // scatter dimension of single-process multi-device DDP: no effect here
    d.broadcast_buffers = o.get_bool("broadcast_buffers", d.broadcast_buffers);
    d.bucket_cap_mb = o.get_int("bucket_cap_mb", d.bucket_cap_mb, 1, 1 << 20);
    d.find_unused_parameters = o.get_bool("find_unused_parameters", d.find_unused_parameters);
    d.check_reduction = o.get_bool("check_reduction", d.check_reduction); // deprecated in PyTorch; no effect
    d.gradient_as_bucket_view = o.get_bool("gradient_as_bucket_view", d.gradient_as_bucket_view);
    d.static_graph = o.get_bool("static_graph", d.static_graph); // buckets never change here: no effect
    d.comm_hook = o.get_enum("comm_hook", d.comm_hook, {"no", "fp16", "bf16", "power_sgd", "batched_power_sgd"});
    if (d.comm_hook == "power_sgd" || d.comm_hook == "batched_power_sgd")
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("comm_hook") + ": the PowerSGD communication hooks are " + kNotYet +
                                          "; use \"no\", \"fp16\" or \"bf16\"");
    // comm_wrapper only wraps PowerSGD hooks in Accelerate, so nothing but "no" has a meaning here.
    std::string wrapper = o.get_enum("comm_wrapper", "no", {"no", "fp16", "bf16"});
    if (wrapper != "no")
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("comm_wrapper") + ": communication wrappers apply to the PowerSGD "
                                                                  "hooks, which are " + kNotYet + "; got \"" + wrapper + "\"");
    if (auto st = o.get_object("comm_state_option")) {
        st->finish(); // PowerSGD's options: only an empty object is meaningful without PowerSGD
    }
    o.finish();
}

// kwargs_handlers.init_process_group: InitProcessGroupKwargs (backend, init_method, timeout in seconds).
void parse_init_process_group(JsonObject &o, InitProcessGroupKwargs &k)
{
    if (auto b = o.get_optional_string("backend")) {
        if (*b == "gloo" || *b == "mpi" || *b == "nccl") k.backend = *b;
        else if (*b == "ccl" || *b == "xccl" || *b == "hccl" || *b == "cncl" || *b == "mccl" || *b == "ucc" ||
                 b->find("nccl,") != std::string::npos || b->find(":nccl") != std::string::npos)
            fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("backend") + ": the \"" + *b + "\" backend is " + kNotYet +
                                              "; expected \"gloo\", \"mpi\" or \"nccl\"");
        else
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("backend") + ": expected \"gloo\", \"mpi\" or \"nccl\", got \"" +
                                                 *b + "\"");
    }
    if (auto m = o.get_optional_string("init_method")) {
        if (m->rfind("env://", 0) != 0 && m->rfind("tcp://", 0) != 0 && m->rfind("file://", 0) != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("init_method") + ": expected \"env://\", \"tcp://HOST:PORT\" "
                                                                        "or \"file:///PATH\", got \"" + *m + "\"");
        k.init_method = *m;
    }
    k.timeout = o.get_double("timeout", k.timeout, 0.0, 1e9, true);
    auto place = [&o](const char *key, int64_t lo) -> std::optional<int32_t> {
        if (!o.has(key)) return std::nullopt;
        return static_cast<int32_t>(o.get_int(key, lo, lo, INT32_MAX));
    };
    k.rank = place("rank", 0);
    k.world_size = place("world_size", 1);
    k.local_rank = place("local_rank", 0);
    k.local_world_size = place("local_world_size", 1);
    if (k.rank.has_value() != k.world_size.has_value())
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(k.rank ? "world_size" : "rank") + ": needed with " +
                                             o.path_of(k.rank ? "rank" : "world_size") + " (both or neither)");
    if (k.rank && *k.rank >= *k.world_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("rank") + ": " + std::to_string(*k.rank) + " is not below world_size " +
                                             std::to_string(*k.world_size));
    if ((k.local_rank || k.local_world_size) && !k.rank)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(k.local_rank ? "local_rank" : "local_world_size") +
                                             ": only with rank and world_size");
    o.finish();
}

// The process's place from init_process_group's rank and world_size, over what the environment said.
void apply_process_place(const InitProcessGroupKwargs &k, ProcessTopology &t)
{
    if (!k.rank) return;
    t.rank = *k.rank;
    t.world_size = *k.world_size;
    t.launcher = "init_process_group";
    if (k.local_rank) t.local_rank = *k.local_rank;
    if (k.local_world_size) t.local_world_size = *k.local_world_size;
    else if (!k.local_rank && t.local_world_size > t.world_size) t.local_world_size = t.world_size;
    if (t.local_rank >= t.local_world_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.local_rank: " + std::to_string(t.local_rank) +
                                             " is not below local_world_size " + std::to_string(t.local_world_size));
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
    if (auto ddp = kw->get_object("ddp")) parse_ddp_kwargs(*ddp, c.ddp);
    if (auto gs = kw->get_object("grad_scaler")) {
        // PyTorch's GradScaler asserts growth_factor > 1 and backoff_factor < 1; its growth tracker is an int32.
        auto &g = c.grad_scaler;
        g.init_scale = gs->get_double("init_scale", g.init_scale, 0.0, FLT_MAX, true);
        g.growth_factor = gs->get_double("growth_factor", g.growth_factor, 1.0, FLT_MAX, true);
        g.backoff_factor = gs->get_double("backoff_factor", g.backoff_factor, 0.0, 1.0, true, true);
        g.growth_interval = gs->get_int("growth_interval", g.growth_interval, 1, INT32_MAX);
        g.enabled = gs->get_bool("enabled", g.enabled);
        gs->finish();
    }
    if (auto ipg = kw->get_object("init_process_group")) parse_init_process_group(*ipg, c.init_process_group);
    if (auto fp8 = kw->get_object("fp8_recipe")) parse_fp8_recipe(*fp8, c.fp8_recipe);
    if (auto prof = kw->get_object("profile")) parse_profile_kwargs(*prof, c.profile);
    kw->finish();
}

// Accelerator(project_dir=..., project_config=ProjectConfiguration(...)): project_dir applies when the
// configuration has none (Accelerate's set_directories), and logging_dir defaults to project_dir.
void parse_project_config(JsonObject &root, ProjectConfiguration &p)
{
    auto non_empty_path = [](JsonObject &o, const char *key) -> std::optional<std::string> {
        auto v = o.get_optional_string(key);
        if (v && v->empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": expected a non-empty path, got \"\"");
        if (v && v->find('\0') != std::string::npos)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": the path contains a NUL character");
        return v;
    };
    auto top_dir = non_empty_path(root, "project_dir");
    if (auto o = root.get_object("project_config")) {
        p.project_dir = non_empty_path(*o, "project_dir");
        p.logging_dir = non_empty_path(*o, "logging_dir");
        p.automatic_checkpoint_naming = o->get_bool("automatic_checkpoint_naming", false);
        p.total_limit = o->get_optional_int("total_limit", 1, INT32_MAX);
        p.iteration = o->get_int("iteration", 0, 0, INT64_MAX / 2);
        p.save_on_each_node = o->get_bool("save_on_each_node", false);
        o->finish();
    }
    if (top_dir && !p.project_dir) p.project_dir = top_dir;
    if (p.project_dir && !p.logging_dir) p.logging_dir = p.project_dir;
    if (p.automatic_checkpoint_naming && !p.project_dir)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "project_config.automatic_checkpoint_naming: true needs "
                                         "project_config.project_dir (or project_dir), which is not set");
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
    // null stays null (reported so): Accelerate decides per loader, False for map-style data sets.
    if (c.dataloader.dispatch_batches.value_or(false) && !c.device_placement) // prepare_data_loader's rule
        fail(ACCEL_ERR_INVALID_ARGUMENT, dl->path_of("dispatch_batches") + ": true requires device_placement: true");
    c.dataloader.even_batches = dl->get_bool("even_batches", true);
    c.dataloader.use_seedable_sampler = dl->get_bool("use_seedable_sampler", false);
    if (auto s = dl->get_optional_int("data_seed", 0, INT64_MAX)) c.dataloader.data_seed = static_cast<uint64_t>(*s);
    c.dataloader.non_blocking = dl->get_bool("non_blocking", false);
    // What StatefulDataLoader gives Accelerate (the loader's position in dl_state_dict.bin, restored by
    // load_state) every accel loader does either way, so true asks for nothing more; kept for the effective config.
    c.dataloader.use_stateful_dataloader = dl->get_bool("use_stateful_dataloader", false);
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
    c.cpu = env_bool("ACCELERATE_USE_CPU", false);
    c.malloc_tuning = env_bool("ACCEL_MALLOC_TUNING", true);

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
            if (t == "cuda" && !torch::cuda::is_available())
                fail(ACCEL_ERR_UNIMPLEMENTED, p + ": the \"cuda\" generator needs a GPU, and this LibTorch sees none");
            if (t != "torch" && t != "generator" && t != "cuda")
                fail(ACCEL_ERR_UNIMPLEMENTED, p + ": the \"" + t + "\" generator does not exist in this build");
        }
    }
    c.step_scheduler_with_optimizer = root.get_bool("step_scheduler_with_optimizer", true);

    // Accelerate reads ACCELERATE_FP8_* only when it builds an FP8 recipe; JSON values then override them.
    if (c.mixed_precision == ACCEL_MIXED_PRECISION_FP8) fp8_recipe_from_env(c.fp8_recipe);
    parse_kwargs_handlers(root, c);
    apply_process_place(c.init_process_group, c.topology);
    parse_project_config(root, c.project);
    parse_sharding_plugins(root, c);
    parse_parallelism_config(root, c);
    parse_megatron_lm_plugin(root, c); // its pipeline onto parallelism_config
    c.dynamo_backend = parse_dynamo(root);
    c.log_with = checked_log_with(root.get_string_or_array("log_with", {}), "log_with");
    // Accelerate refuses file trackers without a logging_dir (TensorBoard's "requires a logging_dir").
    if (!c.log_with.empty() && !c.project.logging_dir)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "log_with: \"" + c.log_with.front() +
                                             "\" writes files under project_config.logging_dir (or project_dir), "
                                             "which is not set");
    root.finish();

    // Multi-process topologies are checked when the communicator is created (src/distributed).
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
    w.add("dynamo_backend", c.dynamo_backend == "EAGER" ? "eager" : c.dynamo_backend == "OFI" ? "ofi" : "no");
    w.begin_object("kwargs_handlers")
        .begin_object("autocast")
        .add("enabled", c.autocast.enabled)
        .add("cache_enabled", c.autocast.cache_enabled)
        .end_object()
        .begin_object("grad_scaler")
        .add("init_scale", c.grad_scaler.init_scale)
        .add("growth_factor", c.grad_scaler.growth_factor)
        .add("backoff_factor", c.grad_scaler.backoff_factor)
        .add("growth_interval", c.grad_scaler.growth_interval)
        .add("enabled", c.grad_scaler.enabled)
        .end_object()
        .begin_object("fp8_recipe")
        .add("backend", c.fp8_recipe.backend)
        .add("fp8_format", c.fp8_recipe.fp8_format)
        .add("margin", c.fp8_recipe.margin)
        .add("interval", c.fp8_recipe.interval)
        .add("amax_history_len", c.fp8_recipe.amax_history_len)
        .add("amax_compute_algo", c.fp8_recipe.amax_compute_algo)
        .add_bools("override_linear_precision", {c.fp8_recipe.override_linear_precision[0],
                                                 c.fp8_recipe.override_linear_precision[1],
                                                 c.fp8_recipe.override_linear_precision[2]})
        .add("use_autocast_during_eval", c.fp8_recipe.use_autocast_during_eval)
        .end_object()
        .begin_object("ddp")
        .add("dim", c.ddp.dim)
        .add("broadcast_buffers", c.ddp.broadcast_buffers)
        .add("bucket_cap_mb", c.ddp.bucket_cap_mb)
        .add("find_unused_parameters", c.ddp.find_unused_parameters)
        .add("check_reduction", c.ddp.check_reduction)
        .add("gradient_as_bucket_view", c.ddp.gradient_as_bucket_view)
        .add("static_graph", c.ddp.static_graph)
        .add("comm_hook", c.ddp.comm_hook)
        .end_object()
        .begin_object("init_process_group");
    if (c.init_process_group.backend.empty()) w.add_null("backend");
    else w.add("backend", c.init_process_group.backend);
    if (c.init_process_group.init_method.empty()) w.add_null("init_method");
    else w.add("init_method", c.init_process_group.init_method);
    w.add("timeout", c.init_process_group.timeout);
    if (c.init_process_group.rank)
        w.add("rank", static_cast<int64_t>(*c.init_process_group.rank))
            .add("world_size", static_cast<int64_t>(*c.init_process_group.world_size));
    w.end_object();
    write_profile_kwargs(w, c.profile);
    w.end_object();
    w.begin_object("project_config");
    if (c.project.project_dir) w.add("project_dir", *c.project.project_dir);
    else w.add_null("project_dir");
    if (c.project.logging_dir) w.add("logging_dir", *c.project.logging_dir);
    else w.add_null("logging_dir");
    w.add("automatic_checkpoint_naming", c.project.automatic_checkpoint_naming);
    if (c.project.total_limit) w.add("total_limit", *c.project.total_limit);
    else w.add_null("total_limit");
    w.add("iteration", c.project.iteration).add("save_on_each_node", c.project.save_on_each_node).end_object();
    w.add("log_with", c.log_with);
    write_sharding(w, c.sharding);
    if (c.parallelism.given) { // only when given: the effective config of other runs stays as it was
        const ParallelismConfig &p = c.parallelism;
        w.begin_object("parallelism_config")
            .add("dp_replicate_size", static_cast<int64_t>(p.dp_replicate_size))
            .add("dp_shard_size", static_cast<int64_t>(p.dp_shard_size))
            .add("tp_size", static_cast<int64_t>(p.tp_size))
            .add("cp_size", static_cast<int64_t>(p.cp_size))
            .add("sp_size", static_cast<int64_t>(p.sp_size))
            .add("cp_backend", p.cp_backend)
            .add("sp_backend", p.sp_backend)
            .add("sequence_parallel", p.sequence_parallel)
            .end_object();
    }
    w.begin_object("process")
        .add("rank", static_cast<int64_t>(c.topology.rank))
        .add("world_size", static_cast<int64_t>(c.topology.world_size))
        .add("local_rank", static_cast<int64_t>(c.topology.local_rank))
        .add("local_world_size", static_cast<int64_t>(c.topology.local_world_size))
        .add("launcher", c.topology.launcher)
        .end_object();
    return w.str();
}

} // namespace accel::config
