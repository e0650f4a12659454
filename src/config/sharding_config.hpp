// Typed form of fsdp_plugin / deepspeed_plugin (and the launcher's FSDP_* / ACCELERATE_DEEPSPEED_*
// variables): which sharding the engine in src/parallel/fsdp runs. Both front ends map onto the same
// three switches (what is partitioned) plus when parameters are freed.
#pragma once

#include "config/optimizer_config.hpp"
#include "config/scheduler_config.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace accel::config {

struct ShardingConfig {
    // "" (plain DDP), "fsdp" or "deepspeed".
    std::string frontend;
    // The name the user chose: FSDP's strategy ("FULL_SHARD", ...) or "ZERO_<stage>".
    std::string strategy;
    bool shard_optimizer = false;       // ZeRO-1 and up: each rank steps only its slice of the flat parameters
    bool shard_gradients = false;       // ZeRO-2 and up: gradients reduce-scattered, a rank keeps its slice
    bool shard_parameters = false;      // ZeRO-3 / FSDP SHARD_GRAD_OP, FULL_SHARD: full parameters exist only
                                        // while a unit computes
    bool reshard_after_forward = false; // FULL_SHARD / ZeRO-3: freed after a unit's forward, gathered again
                                        // before its backward (else kept until the end of backward)
    // HYBRID_SHARD / HYBRID_SHARD_ZERO2: shard among the processes of a node (this many, ranks node-contiguous),
    // replicate across nodes (gradient shards all-reduced between the nodes' same local ranks). 0: not hybrid.
    int32_t hybrid_group_size = 0;
    // Wrap policy: "NO_WRAP" (one unit), "TRANSFORMER_BASED_WRAP" (every layer whose type is in
    // wrap_classes is a unit), "SIZE_BASED_WRAP" (every layer with >= min_num_params parameters).
    std::string auto_wrap_policy = "NO_WRAP";
    std::vector<std::string> wrap_classes;
    int64_t min_num_params = 0;
    // deepspeed_plugin: every layer with parameters is a unit (DeepSpeed gathers ZeRO-3 parameters module by
    // module and reduces gradients in buckets while backward runs); one unit for a model without layers.
    bool wrap_every_layer = false;
    bool sync_module_states = true;  // broadcast rank 0's parameters and buffers when prepared
    // Prefetching (FSDP's forward_prefetch / backward_prefetch): the all-gather of the unit that computes next
    // is queued while the current one computes. backward_prefetch: "NO_PREFETCH", "BACKWARD_PRE" (when a
    // unit's backward starts) or "BACKWARD_POST" (when it ends).
    bool forward_prefetch = false;
    std::string backward_prefetch = "NO_PREFETCH";
    bool limit_all_gathers = true;   // at most one all-gather ahead of use (always the case here)
    bool use_orig_params = false;
    bool activation_checkpointing = false; // fsdp_plugin: the model recomputes its blocks in backward
    int64_t fsdp_version = 1;
    std::string state_dict_type = "FULL_STATE_DICT";
    // mixed_precision_policy (FSDP's MixedPrecision): "float32" or "bfloat16". Parameters are gathered and
    // computed in param_dtype from float32 master shards (which the optimizer steps), gradients reduced in
    // reduce_dtype, floating-point buffers kept in buffer_dtype. Without a policy, mixed_precision "bf16"
    // sets all three to bfloat16, as Accelerate's set_mixed_precision does.
    std::string param_dtype = "float32", reduce_dtype = "float32", buffer_dtype = "float32";
    // DeepSpeed: zero_stage, and gradient_clipping (clip inside the optimizer step; 0 = none).
    int64_t zero_stage = -1;
    double gradient_clipping = 0.0;
    bool zero3_init_flag = false; // models built while the accelerator lives are partitioned (parallel/fsdp/zero_init)
    // FSDP: from_pretrained's models built while the accelerator lives are partitioned, each process reading only
    // its slices of the weights (Accelerate: rank 0 alone loads, the others start empty; parallel/fsdp/zero_init).
    bool cpu_ram_efficient_loading = false;
    bool zero3_save_16bit_model = false;
    // offload_optimizer_device (or hf_ds_config's zero_optimization.offload_optimizer): "none", "cpu" (the
    // state stays in host memory, where this CPU build keeps it anyway; accounted as offloaded) or "nvme" (in
    // files under offload_optimizer_nvme_path, resident only around each unit's step).
    std::string offload_optimizer_device = "none";
    std::string offload_optimizer_nvme_path;
    std::string offload_optimizer_nvme_path_key; // the JSON path that set it, for messages
    // offload_param_device (DeepSpeed's offload_param, ZeRO-3 only; FSDP's cpu_offload is "cpu"): "none", "cpu"
    // (parameter storage stays in host memory, where this CPU build keeps it anyway; accounted as offloaded)
    // or "nvme" (ZeRO-3's parameter shards in files under offload_param_nvme_path: all-gathers read them from
    // there, and a shard is in memory only while the optimizer steps it, loading or summoning).
    std::string offload_param_device = "none";
    std::string offload_param_nvme_path;
    std::string offload_param_nvme_path_key, offload_param_device_key; // JSON paths, for messages
    // hf_ds_config's zero_optimization sizes, in elements (-1: "auto" or absent, accel's own behaviour).
    // accel's engine moves one unit per collective, prefetches one unit ahead and steps one shard at a time;
    // the engine checks at prepare that a given size holds for the model's units, and honours
    // stage3_prefetch_bucket_size 0 (no prefetching) and stage3_max_reuse_distance (a unit whose backward
    // comes within that many gathered elements of its forward stays gathered in between, as long as
    // stage3_max_live_parameters allows).
    struct DeepSpeedSize {
        int64_t value = -1;
        bool automatic = false; // "auto": Accelerate fills it at prepare where the model has a hidden size
        std::string key;        // its JSON path, for messages
        bool given() const { return value >= 0; }
    };
    DeepSpeedSize reduce_bucket_size, allgather_bucket_size, prefetch_bucket_size, param_persistence_threshold,
        model_persistence_threshold, max_live_parameters, max_reuse_distance, sub_group_size;
    // hf_ds_config's train_batch_size when a number while train_micro_batch_size_per_gpu is "auto" or absent:
    // prepare fills the micro batch from the data loader, as Accelerate, and checks the product.
    std::optional<int64_t> ds_train_batch_size_to_check;
    // hf_ds_config's train_micro_batch_size_per_gpu when a number: a loader whose batch per process differs is
    // warned about (the loader's batch trains; DeepSpeed's batch arithmetic assumed this number).
    std::optional<int64_t> ds_micro_batch_size_to_check;

    // hf_ds_config's optimizer / scheduler blocks: the program passes Accelerate's DummyOptim / DummyScheduler
    // ({"type": "dummy"}) and prepare builds these in their place, filling the values that were "auto" as
    // Accelerate fills them (lr and weight_decay from the DummyOptim; warmup_min_lr 0, warmup_max_lr the
    // optimizer's lr, warmup_num_steps and total_num_steps from the DummyScheduler).
    struct DeepSpeedOptimizer {
        OptimizerConfig config;
        bool auto_lr = false, auto_weight_decay = false;
        std::string key; // its JSON path
    };
    struct DeepSpeedScheduler {
        SchedulerConfig config;
        bool auto_min_lr = false, auto_max_lr = false, auto_warmup = false, auto_total = false;
        std::string key;
    };
    std::optional<DeepSpeedOptimizer> ds_optimizer;
    std::optional<DeepSpeedScheduler> ds_scheduler;

    bool enabled() const { return !frontend.empty(); }
};

} // namespace accel::config
