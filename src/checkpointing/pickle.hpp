// Python objects (state/state_dict.hpp) as torch.save pickles them (protocol 2), and the reading side: enough of pickle to
// write and read state dicts, optimizer/scheduler states, RNG and scaler states, and custom blobs.
// Tensors are written by the archive layer (torch_archive.hpp) as persistent ids, as torch.save does.
#pragma once

#include "state/state_dict.hpp"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel::ckpt {

// Called for each tensor while pickling: returns the persistent-id fields (storage key, numel of the
// storage, storage type name such as "FloatStorage").
struct StorageRef {
    std::string key;
    std::string type_name;
    int64_t numel = 0;
};
using StorageSaver = std::function<StorageRef(const at::Tensor &)>;
// Serialises `obj` as pickle protocol 2 (torch.save's default).
std::string pickle_dumps(const PyObj &obj, const StorageSaver &save_storage);

// Returns a flat tensor of `numel` elements of `dtype` for storage `key` (what torch.load's
// persistent_load does).
using StorageLoader = std::function<at::Tensor(const std::string &key, at::ScalarType dtype, int64_t numel)>;
// Parses pickle data from an untrusted source: every error is accel::Error(DATA_LOSS) "<what>: ...".
// Only allow-listed globals are accepted (OrderedDict, tensor rebuilds, storage types, _codecs.encode).
PyRef pickle_loads(const uint8_t *data, size_t len, const StorageLoader &load_storage, const std::string &what);

// "FloatStorage" <-> at::kFloat.
const char *storage_type_name(at::ScalarType t);

} // namespace accel::ckpt
