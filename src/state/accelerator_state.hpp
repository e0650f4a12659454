// AcceleratorState: what every object prepared by one accelerator shares. Prepared objects hold it
// through a shared_ptr, so freeing the accelerator handle first is safe.
#pragma once

#include "config/accelerator_config.hpp"
#include "state/gradient_state.hpp"

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace accel {

class Accelerator;
class GradScaler;
namespace distributed {
class Communicator;
class DeviceMesh;
}
namespace profiling {
class ProfileSession;
}

struct AcceleratorState {
    explicit AcceleratorState(config::AcceleratorConfig c) : config(std::move(c)), gradient(config.gradient_accumulation) {}

    config::AcceleratorConfig config;
    GradientState gradient;
    int64_t step = 0;            // accumulate()'s micro-step counter
    bool in_accumulate = false;  // between accumulate_begin and accumulate_end
    std::shared_ptr<GradScaler> scaler; // mixed_precision "fp16" with kwargs_handlers.grad_scaler.enabled
    std::shared_ptr<distributed::Communicator> comm; // the process's communicator (src/distributed)
    // The processes on the parallelism dimensions (parallelism_config, or what the plugins imply), built
    // once by the accelerator over `comm`; parts take their group and rank from it.
    std::shared_ptr<distributed::DeviceMesh> mesh;
    std::vector<bool> main_process_first; // open main_process_first_begin calls: true if this rank waits at end
    // The accelerator over this state while it lives (null after it is freed): a prepared model's
    // save_pretrained gathers and writes through its save_model.
    Accelerator *accelerator = nullptr;
    // accelerator.profile() between accel_accelerator_profile_begin and _end (null otherwise); optimizer
    // steps advance its schedule (src/profiling/profile_session.hpp).
    std::shared_ptr<profiling::ProfileSession> profile;
    // Accelerate's accelerator.device: cuda:(LOCAL_RANK % GPUs) where the LibTorch has CUDA and a GPU is
    // visible and `cpu` is false, else the CPU.
    c10::Device device{c10::kCPU};

    // Whether prepare moves models and batches to `device` (device_placement, and a device to move to).
    bool places_on_device() const { return config.device_placement && !device.is_cpu(); }

    int32_t num_processes() const { return config.topology.world_size; }
    int32_t process_index() const { return config.topology.rank; }
    // The data shards: processes with different (dp_replicate, dp_shard) coordinates get different batches;
    // the tensor and context parallel ranks of one data shard get the same one.
    int32_t data_parallel_size() const;
    int32_t data_parallel_rank() const;
};

} // namespace accel
