// safetensors files from and to LibTorch tensors. Writing streams each tensor's memory straight to the
// file (no staging copy) and fsyncs; loading maps the file and makes tensors over the map without
// copying when the data is aligned for its dtype (always, for files laid out by the reference writer).
#pragma once

#include "checkpointing/safetensors_format.hpp"
#include "state/state_dict.hpp" // TensorList

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::ckpt {


std::optional<StDtype> st_dtype_of(at::ScalarType t);
std::optional<at::ScalarType> scalar_type_of(StDtype d);

// Writes `tensors` (CPU; non-contiguous ones are made contiguous first) to `path` and fsyncs it.
// `metadata` null: no __metadata__ entry.
void save_safetensors(const std::string &path, const TensorList &tensors, const StringMap *metadata);
// The bytes save_safetensors would write (for tests and small files).
std::string safetensors_bytes(const TensorList &tensors, const StringMap *metadata);

struct LoadedSafetensors {
    TensorList tensors; // in header order; they keep the file mapped while alive
    bool has_metadata = false;
    StringMap metadata;
};
// Validates the whole file first (DATA_LOSS naming the tensor and the rule), then maps it.
LoadedSafetensors load_safetensors(const std::string &path);
// The same from bytes in memory (copied into tensors).
LoadedSafetensors parse_safetensors(const uint8_t *data, size_t len, const std::string &what);

} // namespace accel::ckpt
