// Accelerate's compile settings (dynamo_backend, dynamo_plugin / TorchDynamoPlugin, ACCELERATE_DYNAMO_*) mapped
// honestly: torch.compile (TorchDynamo and its backends) exists only in Python PyTorch, so "no" and "eager"
// (which runs the model as written, as torch.compile(backend="eager") computes it) are accepted, "ofi" (Accelerate:
// "TorchScript's optimize_for_inference, inference only") is LibTorch's own freeze + optimize_for_inference for
// TorchScript models (Model::set_compile_backend), and every other backend is refused by name with the reason. One table for the JSON keys (accelerator_config.cpp), the
// environment and config files (config_file.cpp). No LibTorch, no JSON: the accel program uses it too.
#pragma once

#include <string>

namespace accel::config {

// Accelerate's DynamoBackend value for `value` (any case, as DynamoBackend(value.upper())): "NO", "EAGER" or "OFI".
// Another of Accelerate's backends is ACCEL_ERR_UNIMPLEMENTED, an unknown name ACCEL_ERR_INVALID_ARGUMENT, both
// naming `where` and the value.
std::string check_dynamo_backend(const std::string &value, const std::string &where);

} // namespace accel::config
