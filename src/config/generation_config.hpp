// Typed form of accel_model_generate's options: Hugging Face's GenerationConfig names, plus a seed.
#pragma once

#include <cstdint>
#include <optional>

namespace accel::config {

struct GenerationConfig {
    int64_t max_new_tokens = 20;
    bool do_sample = false;            // false: greedy (argmax)
    double temperature = 1.0;          // > 0; logits are divided by it before sampling
    int64_t top_k = 50;                // sample among the k most likely tokens; 0 = all
    std::optional<uint64_t> seed;      // the sampler's own generator; absent: drawn from the default one
    std::optional<int64_t> eos_token_id; // a row that produced it is finished (later tokens repeat it)
    bool use_cache = true;             // KV cache; false recomputes every position each step
};

GenerationConfig parse_generation_config(const char *json);

} // namespace accel::config
