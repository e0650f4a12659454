// Accelerate's dispatch_model / load_checkpoint_and_dispatch: each module's weights live where a device map says.
// Modules mapped to "disk" keep their parameters in an offload folder (offload_folder.hpp): between forwards the
// parameters hold no memory (their shape and dtype stay), and the model's forward seam (ForwardHooks) reads a
// layer's parameters from the folder just before the layer computes and releases them after it - Accelerate's
// AlignDevicesHook(offload=True) at the granularity of the model's top-level layers. The execution device is
// the CPU (GPU targets are UNIMPLEMENTED), so modules mapped to "cpu" stay where they are.
#pragma once

#include "config/dispatch_options.hpp"

#include <c10/core/ScalarType.h>

#include <string>

namespace at {
class Tensor;
}

namespace accel {
class Model;
}

namespace accel::big_modeling {

// dispatch_model. The map is checked first (check_device_map). Disk modules need options.offload_dir: when it
// holds no index.json their parameters and buffers are written there first (offload_state_dict), otherwise the
// folder's entries are used (each disk parameter must be there with its shape). FAILED_PRECONDITION for a model
// that is prepared, dispatched or otherwise hooked.
void dispatch_model(Model &model, const config::DeviceMap &map, const config::DispatchOptions &options);

// load_checkpoint_and_dispatch: the checkpoint (any file or folder accel_model_load_checkpoint reads) is loaded
// into the model, then the model is dispatched with the options' map (none: loaded only).
void load_checkpoint_and_dispatch(Model &model, const std::string &checkpoint, const config::LoadAndDispatchOptions &options);

// The model's own name of the tensor a checkpoint key names (another spelling of it: a tied weight's second name),
// or "" when the model has no such tensor.
std::string own_name(const Model &model, const std::string &key);

// A checkpoint tensor (`src`, mapped) written into the offload folder `dir` as `name`, in `dtype`: read into a
// tensor of its own, so that only one tensor's bytes are in memory at a time.
void offload_from_checkpoint(const std::string &dir, const std::string &name, const at::Tensor &src,
                             at::ScalarType dtype);

// Whether dispatch_model put offload hooks on `model` (Accelerator::prepare refuses such a model).
bool is_dispatched(const Model &model);

} // namespace accel::big_modeling
