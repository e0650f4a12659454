#include "random/random.hpp"

#include <ATen/Context.h>

namespace accel {

void set_seed(uint64_t seed, bool deterministic)
{
    at::manual_seed(seed);
    if (deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
}

} // namespace accel
