// Which device a process trains on (Accelerate's PartialState.device), decided without LibTorch so that it can be
// tested with any number of GPUs on a machine that has none: state/device.cpp asks LibTorch for the count and
// makes the choice the current device.
#pragma once

#include <optional>
#include <string>

namespace accel {

struct DeviceChoice {
    bool cuda = false; // else the CPU
    int index = 0;     // the GPU, with cuda
};

// ACCELERATE_TORCH_DEVICE, when set (Ray Train sets it in every worker to str(ray.train.torch.get_device()):
// "cuda:1", or "cpu" on a worker without GPUs), decides as in Accelerate, where it wins over `cpu`: "cpu" the CPU,
// "cuda:N" GPU N (FAILED_PRECONDITION when this process sees no GPU N), "cuda" torch.device("cuda"), the current
// GPU of a fresh process, 0. Another device type (mps, xpu, npu, ...) is UNIMPLEMENTED (this LibTorch runs on the
// CPU and CUDA), a malformed value INVALID_ARGUMENT; both name the variable. Unset: the CPU when `cpu` or no GPU
// is visible, else GPU local_rank % gpu_count.
DeviceChoice choose_device(bool cpu, int local_rank, int gpu_count, const std::optional<std::string> &torch_device);

} // namespace accel
