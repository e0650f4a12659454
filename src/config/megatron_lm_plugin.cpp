#include "config/megatron_lm_plugin.hpp"

#include "common/error.hpp"
#include "config/accelerator_config.hpp"
#include "config/env.hpp"
#include "config/json.hpp"
#include "config/str_to_bool.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

namespace accel::config {

void use_deepspeed_zero_stage_1(AcceleratorConfig &c, const std::string &path); // config/sharding_config.cpp

namespace {

// MegatronLMPlugin's fields that drive Megatron-LM's own training loop, data sets and schedulers: accel runs
// its train_step instead, so a value given for any of them would be silently ignored.
const char *const kMegatronLoopKeys[] = {
    "pipeline_model_parallel_split_rank", "is_train_batch_min", "train_iters", "train_samples",
    "weight_decay_incr_style", "start_weight_decay", "end_weight_decay", "lr_decay_style", "lr_decay_iters",
    "lr_decay_samples", "lr_warmup_iters", "lr_warmup_samples", "lr_warmup_fraction", "min_lr", "consumed_samples",
    "no_wd_decay_cond", "scale_lr_cond", "lr_mult", "megatron_dataset_flag", "seq_length", "encoder_seq_length",
    "decoder_seq_length", "tensorboard_dir", "set_all_logging_options", "eval_iters", "eval_interval",
    "return_logits", "custom_train_step_class", "custom_train_step_kwargs", "custom_model_provider_function",
    "custom_prepare_model_function", "other_megatron_args"};

struct Megatron {
    int64_t tp_degree = 1, pp_degree = 1, num_micro_batches = 1, layers_per_virtual_stage = 0;
    double gradient_clipping = 1.0; // MegatronLMPlugin's default: Megatron clips at 1.0 unless told 0
    bool sequence_parallelism = false, recompute_activation = false, use_distributed_optimizer = false;
    std::string where = "megatron_lm_plugin";
    bool env = false; // read from the launcher's MEGATRON_LM_* variables, not a JSON object

    // A key as the message names it: the JSON path, or the variable.
    std::string key(const char *json, const char *var) const { return env ? where + var : where + "." + json; }
    // What accel cannot honour with this value: UNIMPLEMENTED naming the key and why.
    [[noreturn]] void refuse(const char *json, const char *var, const std::string &why) const
    {
        fail(ACCEL_ERR_UNIMPLEMENTED, key(json, var) + ": " + why);
    }
};

double env_number(const char *name, double def, bool integer)
{
    const auto v = env_string(name);
    if (!v) return def;
    errno = 0;
    char *end = nullptr;
    const double x = std::strtod(v->c_str(), &end);
    // The range first: converting a double outside int's range (1e30, inf, nan) is undefined behaviour.
    const bool number = end != v->c_str() && *end == '\0' && errno != ERANGE && std::isfinite(x) && x >= (integer ? 1 : 0);
    if (!number || (integer && (x > INT32_MAX || x != std::trunc(x))))
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("environment variable ") + name + ": expected " +
                                             (integer ? "a positive integer" : "a number >= 0") + ", got \"" + *v + "\"");
    return x;
}

Megatron from_env()
{
    Megatron m;
    m.where = "environment variable MEGATRON_LM_";
    m.env = true;
    m.tp_degree = static_cast<int64_t>(env_number("MEGATRON_LM_TP_DEGREE", 1, true));
    m.pp_degree = static_cast<int64_t>(env_number("MEGATRON_LM_PP_DEGREE", 1, true));
    m.num_micro_batches = static_cast<int64_t>(env_number("MEGATRON_LM_NUM_MICRO_BATCHES", 1, true));
    m.gradient_clipping = env_number("MEGATRON_LM_GRADIENT_CLIPPING", 1.0, false);
    m.sequence_parallelism = env_bool("MEGATRON_LM_SEQUENCE_PARALLELISM", false);
    // accelerate launch exports RECOMPUTE_ACTIVATIONS; MegatronLMPlugin reads RECOMPUTE_ACTIVATION: either.
    m.recompute_activation = env_bool("MEGATRON_LM_RECOMPUTE_ACTIVATION", false) || env_bool("MEGATRON_LM_RECOMPUTE_ACTIVATIONS", false);
    m.use_distributed_optimizer = env_bool("MEGATRON_LM_USE_DISTRIBUTED_OPTIMIZER", false);
    return m;
}

Megatron from_json(JsonObject &o)
{
    for (const char *key : kMegatronLoopKeys)
        o.require_absent(key, "Megatron-LM's own training loop is not accel's (train_step runs the pipeline); "
                              "this MegatronLMPlugin key is not supported");
    Megatron m;
    m.where = o.path();
    m.tp_degree = o.get_int("tp_degree", 1, 1, INT32_MAX);
    m.pp_degree = o.get_int("pp_degree", 1, 1, INT32_MAX);
    m.num_micro_batches = o.get_int("num_micro_batches", 1, 1, INT32_MAX);
    m.layers_per_virtual_stage = o.get_int("num_layers_per_virtual_pipeline_stage", 0, 1, INT32_MAX);
    m.gradient_clipping = o.get_double("gradient_clipping", 1.0, 0.0, 1e300);
    m.sequence_parallelism = o.get_bool("sequence_parallelism", false);
    m.recompute_activation = o.get_bool("recompute_activation", false);
    m.use_distributed_optimizer = o.get_bool("use_distributed_optimizer", false);
    o.finish();
    return m;
}

// Megatron's train step clips the gradients by their global norm before each optimizer step; accel's optimizer step
// does (src/accelerator/accelerator.cpp: through the model's wrapper, over the whole mesh, or the sharding engine's
// hook). The value lives where DeepSpeed's gradient_clipping does, which only deepspeed_plugin sets otherwise.
void set_gradient_clipping(const Megatron &m, ShardingConfig &s)
{
    if (m.gradient_clipping == 0.0) return; // Megatron: 0 = no clipping
    if (s.gradient_clipping != 0.0 && s.gradient_clipping != m.gradient_clipping)
        fail(ACCEL_ERR_INVALID_ARGUMENT, m.key("gradient_clipping", "GRADIENT_CLIPPING") + " (" +
                                             std::to_string(m.gradient_clipping) + ") with deepspeed_plugin's gradient_clipping (" +
                                             std::to_string(s.gradient_clipping) + "): both clip inside the optimizer step; "
                                             "give one of them (0 for the other)");
    s.gradient_clipping = m.gradient_clipping;
}

} // namespace

void parse_megatron_lm_plugin(JsonObject &root, AcceleratorConfig &c)
{
    std::optional<JsonObject> obj = root.get_object("megatron_lm_plugin");
    if (!obj && !env_bool("ACCELERATE_USE_MEGATRON_LM", false)) return;
    const Megatron m = obj ? from_json(*obj) : from_env();
    // Megatron's distributed optimizer shards the optimizer state over the data-parallel group: ZeRO-1, which
    // composes with neither the pipeline nor Megatron's tp mapping here.
    if (m.use_distributed_optimizer && (m.pp_degree > 1 || m.tp_degree > 1))
        m.refuse("use_distributed_optimizer", "USE_DISTRIBUTED_OPTIMIZER",
                 "Megatron's distributed optimizer (ZeRO-1) with tp_degree or pp_degree above 1 is not built; set it "
                 "false there (it is mapped onto deepspeed_plugin zero_stage 1 without them)");
    if (m.use_distributed_optimizer && c.sharding.enabled())
        fail(ACCEL_ERR_INVALID_ARGUMENT, m.key("use_distributed_optimizer", "USE_DISTRIBUTED_OPTIMIZER") + " with " +
                                             (c.sharding.frontend == "deepspeed" ? "deepspeed_plugin" : "fsdp_plugin") +
                                             ": both shard the optimizer state; give one of them");
    ParallelismConfig &p = c.parallelism;
    const bool mesh = m.pp_degree > 1 || m.tp_degree > 1;
    if (p.given && mesh)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(m.env ? "the MEGATRON_LM_* environment (ACCELERATE_USE_MEGATRON_LM)"
                                                           : m.where) +
                                             " with parallelism_config: give the parallelism in one of them");
    const int32_t world = std::max(1, c.topology.world_size);
    if (world % (m.tp_degree * m.pp_degree) != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, m.key(m.pp_degree > 1 ? "pp_degree" : "tp_degree", m.pp_degree > 1 ? "PP_DEGREE" : "TP_DEGREE") +
                                             ": tp_degree (" + std::to_string(m.tp_degree) + ") x pp_degree (" +
                                             std::to_string(m.pp_degree) + ") does not divide the job's " +
                                             std::to_string(world) + " processes");
    if (m.pp_degree > 1 && c.sharding.enabled())
        m.refuse("pp_degree", "PP_DEGREE", "pipeline parallelism with fsdp_plugin or deepspeed_plugin is not built yet; "
                                           "it composes with DDP");
    if (m.tp_degree > 1 && c.sharding.enabled())
        m.refuse("tp_degree", "TP_DEGREE", "Megatron's tensor parallelism with fsdp_plugin or deepspeed_plugin is not "
                                           "mapped (which processes shard is the mesh's choice): give parallelism_config's "
                                           "tp_size and dp_shard_size instead");
    if (m.layers_per_virtual_stage > 0 && m.pp_degree == 1)
        fail(ACCEL_ERR_INVALID_ARGUMENT, m.where + ".num_layers_per_virtual_pipeline_stage: needs pp_degree above 1");
    // Megatron's --recompute-activations: selective recomputation, applied to the gpt / llama model at prepare.
    c.selective_recompute = m.recompute_activation;
    if (m.use_distributed_optimizer) use_deepspeed_zero_stage_1(c, m.key("use_distributed_optimizer", "USE_DISTRIBUTED_OPTIMIZER"));
    set_gradient_clipping(m, c.sharding);
    // pp_degree 1: Megatron still splits each batch into num_micro_batches and accumulates (its
    // forward_backward_no_pipelining); train_step does (src/accelerator/accelerator.cpp).
    if (m.pp_degree == 1 && m.num_micro_batches > 1) {
        if (p.given && p.pp_size > 1)
            fail(ACCEL_ERR_INVALID_ARGUMENT, m.key("num_micro_batches", "NUM_MICRO_BATCHES") +
                                                 " with parallelism_config's pipeline: give the micro-batches in one of them");
        p.num_micro_batches = static_cast<int32_t>(m.num_micro_batches);
    }
    if (!mesh) return; // data parallelism only: what accel does without the plugin
    p.given = true;
    p.pp_size = static_cast<int32_t>(m.pp_degree);
    p.tp_size = static_cast<int32_t>(m.tp_degree);
    p.dp_replicate_size = world / (p.pp_size * p.tp_size); // Megatron's data-parallel size: world / (tp x pp)
    p.dp_shard_size = p.cp_size = p.sp_size = 1;
    // Megatron turns sequence parallelism off when tp is 1 (it has nothing to split over).
    p.sequence_parallel = m.sequence_parallelism && m.tp_degree > 1;
    if (m.pp_degree == 1) return;
    p.num_micro_batches = static_cast<int32_t>(m.num_micro_batches);
    p.num_layers_per_virtual_pipeline_stage = m.layers_per_virtual_stage;
    // Megatron: virtual stages mean the interleaved schedule, none its 1F1B.
    p.pp_schedule = m.layers_per_virtual_stage > 0 ? "interleaved_1f1b" : "1f1b";
}

} // namespace accel::config
