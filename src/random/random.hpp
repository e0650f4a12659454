// set_seed: seeds LibTorch's default generator, as accelerate.utils.set_seed; and the state of the
// process's generators as random_states_{rank}.pkl holds it (checkpoint-format.md §6).
#pragma once

#include "state/state_dict.hpp"

#include <cstdint>
#include <string>

namespace accel {

void set_seed(uint64_t seed, bool deterministic);

// The generator entries of random_states_{rank}.pkl (without "step", which is the Accelerator's).
PyRef rng_state_dict();
// Checks the entries of a random_states pickle (DATA_LOSS naming `what`) and returns the function that
// restores the generators from them.
ApplyState load_rng_state_dict(const PyObj &state_dict, const std::string &what);

} // namespace accel
