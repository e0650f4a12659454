// Tensor parallelism's dropout generators (rng_tracker.hpp) in checkpoints, as Megatron keeps its RNG tracker's
// states in every rank's checkpoint, so that a resumed run draws the split regions' masks the uninterrupted run
// would have drawn. save_state adds this process's generators to its random states file:
//   "rng_tracker_states": {"model-parallel-rng": state}  (uint8, the first prepared model split by tp; the i-th
//                                                          prepared model's is "model-parallel-rng.<i>" when i > 0)
//   "rng_tracker_tp": [tp rank, tp size]                  (whose generators they are)
// load_state restores them into a process of the same tp rank and size. On another mesh a process's generator is
// another rank's (its seed is seed + 2718 + tp rank): it keeps the one seeded at prepare, so the split regions'
// masks start again from the seed while the replicated regions' (the default generator, restored) go on.
// Accelerate's load_state reads only its own keys of the file and ignores these.
#pragma once

#include "state/state_dict.hpp"

#include <memory>
#include <string>
#include <vector>

namespace accel {
class Model;
}

namespace accel::parallel::tp {

void add_tracker_states(PyObj &random_states, const std::vector<std::shared_ptr<Model>> &models);
// Takes the keys above out of `random_states` (they are not the default generators' loader's to keep and write
// back), checks them (DATA_LOSS naming `what`) and returns what restores them.
ApplyState take_tracker_states(PyObj &random_states, const std::vector<std::shared_ptr<Model>> &models,
                               const std::string &what);

} // namespace accel::parallel::tp
