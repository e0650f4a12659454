// AcceleratorState: what every object prepared by one accelerator shares. Prepared objects hold it
// through a shared_ptr, so freeing the accelerator handle first is safe.
#pragma once

#include "config/accelerator_config.hpp"
#include "state/gradient_state.hpp"

#include <cstdint>

namespace accel {

struct AcceleratorState {
    explicit AcceleratorState(config::AcceleratorConfig c) : config(std::move(c)), gradient(config.gradient_accumulation) {}

    config::AcceleratorConfig config;
    GradientState gradient;
    int64_t step = 0;            // accumulate()'s micro-step counter
    bool in_accumulate = false;  // between accumulate_begin and accumulate_end

    int32_t num_processes() const { return config.topology.world_size; }
    int32_t process_index() const { return config.topology.rank; }
};

} // namespace accel
