// parallelism_config: Accelerate 1.10+'s ParallelismConfig (dp_replicate_size, dp_shard_size, tp_size,
// cp_size, sp_size and their handlers), from the accelerator JSON or, as Accelerate creates one when
// ACCELERATE_USE_PARALLELISM_CONFIG is "true", from the PARALLELISM_CONFIG_* environment. It sizes the
// device mesh (src/distributed/device_mesh.hpp; docs/guides/parallelism.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace accel::config {

struct ParallelismConfig {
    bool given = false; // a parallelism_config object, or ACCELERATE_USE_PARALLELISM_CONFIG=true
    int32_t dp_replicate_size = 1;
    int32_t dp_shard_size = 1;
    int32_t tp_size = 1;
    int32_t cp_size = 1;
    int32_t sp_size = 1; // Ulysses: the mesh's cp axis with the "ulysses" strategy (never with cp_size > 1)
    std::string cp_backend = "torch";     // PARALLELISM_CONFIG_CP_BACKEND
    std::string sp_backend = "deepspeed"; // PARALLELISM_CONFIG_SP_BACKEND
    std::string cp_comm_strategy = "allgather"; // cp_handler.cp_comm_strategy
    // sp_handler (DeepSpeedSequenceParallelConfig): with sp_seq_length_is_variable false, every batch the
    // prepared loader splits over sp_size must be sp_seq_length long (DeepSpeed's Ulysses sizes its buffers
    // from it); 0 when unset. accel pads and splits any length, so true (the default) needs no length.
    int64_t sp_seq_length = 0;
    bool sp_seq_length_is_variable = true;
    // tp_handler.sequence_parallel (Megatron's sequence_parallelism; transformers' "sequence_parallel" plan style):
    // the layer norms and dropouts between the tp regions run on a 1/tp shard of the sequence.
    bool sequence_parallel = false;
    // Pipeline parallelism (MegatronLMPlugin's pp_degree, num_micro_batches; src/parallel/pipeline): the
    // model's blocks cut into pp_size stages, each batch into num_micro_batches along its first dimension.
    int32_t pp_size = 1;
    int32_t num_micro_batches = 1;
    std::string pp_schedule = "gpipe";
    // The block index each stage after the first starts at (pp_size - 1 ascending values); empty: balanced
    // by parameter count.
    std::vector<int64_t> pp_split_points;
    // pp_schedule "interleaved_1f1b": the model chunks (virtual stages) each rank holds, given as MegatronLMPlugin's
    // num_layers_per_virtual_pipeline_stage (chunks = n_layer / (pp_size x it), known at prepare) or
    // Megatron-core's num_virtual_stages_per_pipeline_rank; 0: not given. With pp_split_points the points cut
    // pp_size x chunks virtual stages.
    int64_t num_layers_per_virtual_pipeline_stage = 0;
    int32_t num_virtual_stages_per_pipeline_rank = 0;

    // The mesh's cp axis (cp_size or sp_size) and how attention crosses it: sp_size's "ulysses", else
    // cp_handler.cp_comm_strategy.
    int32_t sequence_parallel_size() const { return cp_size * sp_size; }
    std::string sequence_strategy() const { return sp_size > 1 ? "ulysses" : cp_comm_strategy; }
    // The length every split batch must have (sp_handler's fixed sp_seq_length under Ulysses); 0: any.
    int64_t fixed_sequence_length() const { return sp_size > 1 && !sp_seq_length_is_variable ? sp_seq_length : 0; }
};

} // namespace accel::config
