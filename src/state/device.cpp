#include "state/device.hpp"

#include "config/env.hpp"
#include "state/device_choice.hpp"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/cuda.h>

namespace accel {

at::Device select_device(const config::AcceleratorConfig &config)
{
    const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
    const DeviceChoice choice = choose_device(config.cpu, config.topology.local_rank, gpus,
                                              config::env_string("ACCELERATE_TORCH_DEVICE"));
    if (!choice.cuda) return at::Device(at::kCPU);
    at::Device device(at::kCUDA, static_cast<c10::DeviceIndex>(choice.index));
    // As Accelerate's torch.cuda.set_device(self.device): LibTorch's "current device" decides where tensors
    // made for plain "cuda" go, and which GPU the caching allocator and NCCL use for this process.
    c10::impl::getDeviceGuardImpl(at::kCUDA)->setDevice(device);
    return device;
}

at::Tensor send_to_device(const at::Tensor &t, const at::Device &device, bool non_blocking)
{
    if (!t.defined() || t.device() == device) return t;
    if (non_blocking && t.is_cpu() && !device.is_cpu()) return t.pin_memory().to(device, /*non_blocking=*/true);
    return t.to(device);
}

} // namespace accel
