// Device maps (Accelerate's big_modeling): which device holds each module's weights. The type is
// config::DeviceMap (parsed from / written as Accelerate's JSON in src/config/device_map.cpp); this header adds
// what needs a model. Shared by helpers "bigmodel" (this file, infer_auto_device_map, module sizes) and
// "offload" (dispatch, offload folders): dispatch takes a DeviceMap checked by check_device_map and asks
// device_for() for each tensor.
#pragma once

#include "config/device_map.hpp"

#include <string>

namespace accel {
class Model;
}

namespace accel::big_modeling {

using config::DeviceMap;
using config::DeviceTarget;

// The entry for a state-dict key: the longest module name equal to the key or a dotted prefix of it ("" matches
// every key); nullptr when none does.
const DeviceTarget *device_for(const DeviceMap &map, const std::string &tensor_name);

// Accelerate's check_device_map: every parameter and buffer of `model` has an entry; otherwise
// ACCEL_ERR_INVALID_ARGUMENT "<what> does not give any device for the following parameters: a, b, ...".
// Entries naming nothing in the model are accepted, as Accelerate does: a map inferred on a transformers model may
// name modules without parameters (dropout, rotary embeddings) that accel's models do not have.
void check_device_map(const Model &model, const DeviceMap &map, const std::string &what);

} // namespace accel::big_modeling
