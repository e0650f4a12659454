// What sequence parallelism (parallelism_config.tp_handler.sequence_parallel) is not built with, refused alike by
// the models that split their activations along the sequence (gpt, llama) in apply_tensor_parallel, before any
// parameter is sliced: context parallelism (both would split the positions), and a tp_plan that leaves an
// attention or MLP replicated (its input would be this rank's 1/tp of the positions, and no gather around a
// replicated region is built).
#pragma once

#include "common/error.hpp"

namespace accel::parallel::tp {

inline void refuse_unbuilt_sequence_parallel(bool sequence_parallel, bool context_parallel, bool plan_overridden)
{
    if (!sequence_parallel) return;
    if (context_parallel)
        fail(ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.tp_handler.sequence_parallel with cp_size > 1 is not built yet");
    if (plan_overridden)
        fail(ACCEL_ERR_UNIMPLEMENTED, "tp_plan: a replicated attention or MLP under parallelism_config.tp_handler."
                                      "sequence_parallel is not built yet");
}

} // namespace accel::parallel::tp
