// The accelerator's device (Accelerate's PartialState.device) and moving tensors onto it (send_to_device).
#pragma once

#include "config/accelerator_config.hpp"

#include <ATen/ATen.h>

namespace accel {

// The device of state/device_choice.hpp's choose_device (ACCELERATE_TORCH_DEVICE, else cuda:(LOCAL_RANK % visible
// GPUs) when `cpu` is false and this LibTorch sees a GPU, else the CPU); a GPU is also made the current CUDA
// device, so tensors made for "cuda" land on it.
at::Device select_device(const config::AcceleratorConfig &config);

// `t` on `device` (itself when it is there already or undefined). `non_blocking` copies from pinned host
// memory (dataloader_config.non_blocking), so the host may go on while the copy runs.
at::Tensor send_to_device(const at::Tensor &t, const at::Device &device, bool non_blocking = false);

} // namespace accel
