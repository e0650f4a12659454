// MegatronLMPlugin's recompute_activation (Megatron's --recompute-activations, recompute_granularity "selective"):
// what prepare does with it. Kept apart so that the accelerator needs neither model's header.
#pragma once

namespace accel {

class Model;

// Turns on the gpt / llama model's selective recomputation (attention's inner activations recomputed in
// backward, as the model spec's "recompute_granularity": "selective" builds it); UNIMPLEMENTED naming the key
// for any other model, which has no such recomputation.
void apply_selective_recompute(Model &model);

} // namespace accel
