// Empty init (Accelerate's init_empty_weights): a model whose parameters have their shape and dtype but no memory,
// on LibTorch's meta device, materialised later by loading weights into it (Model::load_state_dict).
// As Accelerate does, each parameter is made (and initialised) on the CPU and moved to the meta device right after,
// before the next is made, so building costs one tensor's memory at a time; buffers stay where they are (its
// include_buffers=False default). The tensor objects stay the same throughout (the meta tensor and later the
// loaded one take the place of the first inside the same TensorImpl), so every handle the model's layers, tied
// weights and names hold stays valid.
#pragma once

#include "model/model.hpp"

#include <string>

namespace accel::big_modeling {

// The on_parameter hook (model.hpp's ParameterFn) that moves each parameter to the meta device.
ParameterFn empty_init_hook();

// `t` becomes a meta tensor of its shape and dtype, in place (its memory is released).
void move_to_meta(const at::Tensor &t);
// A meta `t` becomes an uninitialised tensor of its shape and dtype on `device`, in place. Autograd state
// (requires_grad) is kept.
void materialize(const at::Tensor &t, const at::Device &device);

// The first parameter or buffer (state-dict order) still on the meta device, or "" when none is.
std::string first_meta_tensor(const Model &model);

} // namespace accel::big_modeling
