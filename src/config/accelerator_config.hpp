// Typed form of the accelerator's JSON config (Accelerator(...) arguments and plugins).
#pragma once

#include "config/parallelism_config.hpp"
#include "config/profile_config.hpp"
#include "config/sharding_config.hpp"

#include <accel/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

struct GradientAccumulationPlugin {
    int64_t num_steps = 1;
    bool adjust_scheduler = true;
    bool sync_with_dataloader = true;
    bool sync_each_batch = false;
};

struct DataLoaderConfiguration {
    bool split_batches = false;
    std::optional<bool> dispatch_batches;
    bool even_batches = true;
    bool use_seedable_sampler = false;
    std::optional<uint64_t> data_seed;
    bool non_blocking = false;
    bool use_stateful_dataloader = false;
};

struct AutocastKwargs {
    bool enabled = true;
    bool cache_enabled = true;
};

// GradScalerKwargs: PyTorch GradScaler's constructor arguments (used with mixed_precision "fp16").
// DeepSpeed's loss scaler (sharding-and-parallelism.md §2.1), used instead of PyTorch's rule under
// deepspeed_plugin with mixed_precision "fp16": hysteresis before halving, doubling after loss_scale_window
// clean steps counted from the last overflow, a floor at min_loss_scale (an overflow there stops the run).
// loss_scale > 0: a static scale, and overflows are not detected (DeepSpeed's static scaler).
struct DeepSpeedLossScale {
    double loss_scale = 0.0;       // 0: dynamic
    double initial_scale = 4294967296.0; // 2^initial_scale_power (2^32: ZeRO's default when no key is given)
    int64_t loss_scale_window = 1000;
    int64_t hysteresis = 1;        // 2 when the fp16 block spells the keys out (DeepSpeed's config default)
    bool consecutive_hysteresis = false;
    double min_loss_scale = 1.0;
};

struct GradScalerKwargs {
    double init_scale = 65536.0;
    double growth_factor = 2.0;  // > 1
    double backoff_factor = 0.5; // in (0, 1)
    int64_t growth_interval = 2000;
    bool enabled = true;
    std::optional<DeepSpeedLossScale> deepspeed; // set by deepspeed_plugin with fp16
};

// FP8RecipeKwargs (TransformerEngine's DelayedScaling recipe), emulated by src/precision/fp8.
struct FP8RecipeKwargs {
    std::string backend = "te";
    std::string fp8_format = "HYBRID";           // "E4M3" or "HYBRID" (forward E4M3, gradients E5M2)
    int64_t margin = 0;
    int64_t interval = 1;                        // recompute the scales every `interval` updates
    int64_t amax_history_len = 1024;
    std::string amax_compute_algo = "most_recent"; // or "max"
    bool override_linear_precision[3] = {false, false, false}; // fprop, dgrad, wgrad in high precision
    bool use_autocast_during_eval = false;
};

// ProjectConfiguration: where save_state writes and how checkpoints are named and rotated.
struct ProjectConfiguration {
    std::optional<std::string> project_dir;
    std::optional<std::string> logging_dir; // defaults to project_dir
    bool automatic_checkpoint_naming = false;
    std::optional<int64_t> total_limit;     // >= 1
    int64_t iteration = 0;                  // the first automatic checkpoint number
    bool save_on_each_node = false;
};

// Process topology read from the launcher's environment.
struct ProcessTopology {
    int32_t rank = 0;
    int32_t world_size = 1;
    int32_t local_rank = 0;
    int32_t local_world_size = 1;
    // Who started the process: "torchrun" (RANK/WORLD_SIZE: accel launch, torchrun), "mpi" (mpirun's
    // OMPI_COMM_WORLD_*), "slurm" (srun's SLURM_*), or "none".
    std::string launcher = "none";
    std::string master_addr = "127.0.0.1"; // MASTER_ADDR
    int32_t master_port = 29500;           // MASTER_PORT
    // torchrun's elastic agent hosts the store at MASTER_ADDR:MASTER_PORT itself
    // (TORCHELASTIC_USE_AGENT_STORE=True): every rank connects as a client, under torch's key prefix
    // "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>", as torch.distributed's env:// rendezvous does.
    bool agent_store = false;
    std::string restart_count = "0";
};

// DistributedDataParallelKwargs (src/parallel/ddp).
struct DistributedDataParallelKwargs {
    int64_t dim = 0;
    bool broadcast_buffers = true;
    int64_t bucket_cap_mb = 25;
    bool find_unused_parameters = false;
    bool check_reduction = false;
    bool gradient_as_bucket_view = false;
    bool static_graph = false;
    std::string comm_hook = "no"; // "no", "fp16", "bf16"
};

// InitProcessGroupKwargs: the communication backend (src/distributed).
struct InitProcessGroupKwargs {
    std::string backend;     // "" = chosen from the environment; "gloo", "mpi", "nccl"
    std::string init_method; // "" = env://; "tcp://host:port", "file:///path"
    double timeout = 1800.0; // seconds, for the rendezvous and every collective
    // torch.distributed.init_process_group's rank and world_size (both or neither): the process's place told at
    // run time instead of by a launcher's environment; they win over RANK / WORLD_SIZE, as in torch. local_rank
    // and local_world_size (accel's additions; default: the environment's, else 0 and 1) say which processes
    // share a machine.
    std::optional<int32_t> rank, world_size, local_rank, local_world_size;
};

struct AcceleratorConfig {
    bool device_placement = true;
    bool cpu = false;
    accel_mixed_precision_t mixed_precision = ACCEL_MIXED_PRECISION_NO;
    GradientAccumulationPlugin gradient_accumulation;
    DataLoaderConfiguration dataloader;
    std::vector<std::string> rng_types{"generator"};
    // dynamo_backend / dynamo_plugin.backend / ACCELERATE_DYNAMO_BACKEND: "NO" or "EAGER" (config/dynamo.hpp), both
    // running the model as written, or "OFI": a TorchScript model evaluates through a frozen, optimized copy
    // (Model::set_compile_backend).
    std::string dynamo_backend = "NO";
    bool step_scheduler_with_optimizer = true;
    AutocastKwargs autocast;
    GradScalerKwargs grad_scaler;
    FP8RecipeKwargs fp8_recipe;
    DistributedDataParallelKwargs ddp;
    InitProcessGroupKwargs init_process_group;
    ProfileKwargs profile; // kwargs_handlers.profile: accelerator.profile()'s settings (src/profiling)
    ProcessTopology topology;
    ProjectConfiguration project;
    // log_with: built-in trackers ("jsonl", "csv", "tensorboard"; "all" expanded), src/tracking/.
    std::vector<std::string> log_with;
    ShardingConfig sharding; // fsdp_plugin / deepspeed_plugin (src/parallel/fsdp)
    ParallelismConfig parallelism; // parallelism_config: the device mesh's sizes (src/distributed/device_mesh)
    // MegatronLMPlugin's recompute_activation (Megatron's --recompute-activations, recompute_granularity
    // "selective"): prepare turns on the gpt / llama model's selective recomputation (refused by name for others).
    bool selective_recompute = false;
    bool malloc_tuning = true; // ACCEL_MALLOC_TUNING (environment only: a process-wide setting)
};

// Parses `json` (NULL = defaults), applying ACCELERATE_* environment defaults. Throws accel::Error.
AcceleratorConfig parse_accelerator_config(const char *json);
// The effective configuration as JSON text (for accel_accelerator_get_config_json).
std::string to_json(const AcceleratorConfig &config);
const char *mixed_precision_name(accel_mixed_precision_t mp);

} // namespace accel::config
