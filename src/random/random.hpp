// set_seed: seeds LibTorch's default generator, as accelerate.utils.set_seed.
#pragma once

#include <cstdint>

namespace accel {

void set_seed(uint64_t seed, bool deterministic);

} // namespace accel
