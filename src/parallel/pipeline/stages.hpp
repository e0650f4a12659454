// Where a pipeline cuts a model's layers into stages (pure arithmetic, tested without a model): balanced by
// each layer's parameter count, or at explicit split points (parallelism_config.pp_split_points).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace accel::config {
struct ParallelismConfig;
}

namespace accel::parallel::pp {

// The first layer of each of `stages` contiguous stages of the layers whose costs are `costs`, minimising
// the largest stage's cost (each stage at least one layer; among equal cuts the later stages get fewer
// layers: the last stage also runs the head and the loss). INVALID_ARGUMENT when there are fewer layers
// than stages.
std::vector<int64_t> balanced_stage_starts(const std::vector<int64_t> &costs, int32_t stages);
// {0, points...} after checking the points against `num_layers` (ascending, inside (0, num_layers), one
// fewer than `stages`); INVALID_ARGUMENT naming parallelism_config.pp_split_points otherwise.
std::vector<int64_t> stage_starts_from_split_points(const std::vector<int64_t> &points, int64_t num_layers, int32_t stages);
// The model chunks (virtual stages) each of `stages` ranks holds under interleaving, from MegatronLMPlugin's
// num_layers_per_virtual_pipeline_stage (the blocks must divide into stages x it, as Megatron checks) or
// Megatron-core's num_virtual_stages_per_pipeline_rank (0: not given; both given must agree).
// INVALID_ARGUMENT naming the keys when neither is given, they disagree, or the blocks do not suffice.
int32_t chunks_per_stage(int64_t layers_per_virtual_stage, int32_t virtual_stages_per_rank, int64_t num_layers, int32_t stages);
// Stage s of p's chunks of blocks [begin, end) (one unless pp_schedule is "interleaved_1f1b": virtual stage
// c * p + s is its chunk c), cut at config.pp_split_points or balanced by `costs` (each block's parameter count).
// The same cut whether the model exists (prepare) or is about to be built (stage_init.hpp). Refusals name the key.
std::vector<std::pair<int64_t, int64_t>> stage_chunks(const std::vector<int64_t> &costs,
                                                      const config::ParallelismConfig &config, int32_t p, int32_t s);

} // namespace accel::parallel::pp
