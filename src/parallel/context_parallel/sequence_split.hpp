// How context parallelism lays a sequence over the cp group: the sequence is cut into 2 x cp equal chunks and
// rank r holds chunks r and 2 x cp - 1 - r, side by side (Megatron-LM's and torch's load balancing for causal
// attention: every rank then has as many query/key pairs below the diagonal as every other). Labels are split
// the same way after the loader shifted them (labels[t] = inputs[t + 1] of the whole sequence), so no rank
// needs its neighbour's first token. Positions stay those of the whole sequence (sequence_positions).
#pragma once

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <vector>

namespace accel::parallel::cp {

// INVALID_ARGUMENT naming `what` and the sizes when `length` is not a multiple of 2 x cp_size.
void check_sequence_length(int64_t length, int32_t cp_size, const char *what);
// What a model under context parallelism checks of its input (`model`: "gpt", "llama"): no key/value cache
// (INTERNAL: generation sets the cp group aside and runs whole) and a local part of two equal chunks
// (INVALID_ARGUMENT).
void check_model_input(int64_t local_length, bool has_cache, const char *model);
// This rank's part of `x` along `dim`: chunks rank and 2 x size - 1 - rank of 2 x size, concatenated.
at::Tensor shard_sequence(const at::Tensor &x, int64_t dim, int32_t rank, int32_t size);
// The inverse: every rank's part (in rank order) back into the whole sequence along `dim`.
at::Tensor unshard_sequence(const std::vector<at::Tensor> &parts, int64_t dim);
// The whole-sequence positions of rank `rank`'s `local_length` tokens (int64, [local_length]).
at::Tensor sequence_positions(int64_t local_length, int32_t rank, int32_t size, at::TensorOptions options);
// The chunk numbers (of 2 x size) rank `rank` holds, first and second half of its part.
inline std::array<int64_t, 2> chunks_of(int32_t rank, int32_t size) { return {rank, 2 * static_cast<int64_t>(size) - 1 - rank}; }

} // namespace accel::parallel::cp
