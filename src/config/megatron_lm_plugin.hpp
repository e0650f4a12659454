// megatron_lm_plugin (Accelerate's MegatronLMPlugin) and the environment `accelerate launch --use_megatron_lm
// --megatron_lm_*` exports (ACCELERATE_USE_MEGATRON_LM, MEGATRON_LM_*): what accel can honour is mapped onto
// parallelism_config (pp_degree -> pp_size, num_micro_batches, num_layers_per_virtual_pipeline_stage -> the
// interleaved schedule; tp_degree -> tp_size (each stage split over tp), sequence_parallelism ->
// tp_handler.sequence_parallel; the remaining processes replicate, as Megatron's data-parallel size is
// world / (tp x pp)) and recompute_activation onto the model's selective recomputation at prepare; every other
// key is refused by name.
#pragma once

namespace accel::config {

class JsonObject;
struct AcceleratorConfig;

// After parse_parallelism_config and the sharding plugins: INVALID_ARGUMENT when both give the mesh, or the
// processes do not divide into tp_degree x pp_degree; UNIMPLEMENTED naming the key for what accel does not build
// with it (tp_degree or pp_degree with a sharding plugin; use_distributed_optimizer with either; gradient_clipping
// other than 0; the Megatron training loop's own keys).
void parse_megatron_lm_plugin(JsonObject &root, AcceleratorConfig &c);

} // namespace accel::config
