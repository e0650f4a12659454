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
// Only allow-listed globals are accepted (OrderedDict, tensor rebuilds, storage types, _codecs.encode,
// NumPy arrays of the dtypes an RNG state uses).
PyRef pickle_loads(const uint8_t *data, size_t len, const StorageLoader &load_storage, const std::string &what);

// NumPy objects, read only in the forms random_states_{i}.pkl holds them (numpy.random.get_state()), and
// written back unchanged: a Global whose `s` is "numpy.dtype" with `items` = (code such as "u4", then
// its __setstate__ tuple), or "numpy.core.multiarray._reconstruct" (or numpy._core's) with `items` = the
// array's __setstate__ tuple (1, shape, dtype, fortran_order, raw bytes); both checked against each other.
bool is_numpy_dtype(const PyObj &o);
// Globals written as calls (py_call): torch.Size, builtins.set, and DeepSpeed's LossScaler and
// ZeroStageEnum (deepspeed_folder.hpp). Read back: a Size as its tuple, a set as a list, a ZeroStageEnum
// as its int, a LossScaler as the call.
bool is_call_global(const std::string &name);
bool is_numpy_array(const PyObj &o);
std::string numpy_code(const PyObj &dtype);

// "FloatStorage" <-> at::kFloat.
const char *storage_type_name(at::ScalarType t);

} // namespace accel::ckpt
