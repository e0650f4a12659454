// Text generation with a decoder (a gpt or llama model): greedy, or sampling with temperature and top-k from a seeded
// generator of its own, with a KV cache (Hugging Face's model.generate for decoder-only models).
#pragma once

#include "config/generation_config.hpp"

#include <ATen/ATen.h>

namespace accel {

class Model;

// input_ids [B, T] or [T] int64 -> [B, T + n] (or [T + n]), n <= max_new_tokens (fewer when every row
// produced eos_token_id). Runs without gradients and without dropout; the model's mode is unchanged.
// `wrapped`: a prepared model's handle (its accelerator's autocast applies), not an unwrapped one.
// UNIMPLEMENTED for other models.
at::Tensor generate(Model &model, const at::Tensor &input_ids, const config::GenerationConfig &options,
                    bool wrapped);

} // namespace accel
