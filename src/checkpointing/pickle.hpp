// Python objects as torch.save pickles them (protocol 2), and the reading side: enough of pickle to
// write and read state dicts, optimizer/scheduler states, RNG and scaler states, and custom blobs.
// Tensors are written by the archive layer (torch_archive.hpp) as persistent ids, as torch.save does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel::ckpt {

struct PyObj;
using PyRef = std::shared_ptr<PyObj>;

struct PyObj {
    enum class Kind { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, OrderedDict, Tensor, Global, Storage };
    Kind kind = Kind::None;
    bool b = false;
    int64_t i = 0;
    double f = 0.0;
    std::string s;                            // Str, Bytes, Global ("module.name"), Storage (key)
    std::vector<PyRef> items;                 // List, Tuple
    std::vector<std::pair<PyRef, PyRef>> map; // Dict, OrderedDict (insertion order)
    at::Tensor tensor;                        // Tensor; Storage: a flat tensor over the storage

    bool is_dict() const { return kind == Kind::Dict || kind == Kind::OrderedDict; }
    // Dict lookup by string key (nullptr when absent or not a dict).
    const PyObj *get(const std::string &key) const;
    const PyObj *get_int_key(int64_t key) const;
};

PyRef py_none();
PyRef py_bool(bool v);
PyRef py_int(int64_t v);
PyRef py_float(double v);
PyRef py_str(std::string v);
PyRef py_bytes(std::string v);
PyRef py_list(std::vector<PyRef> items = {});
PyRef py_tuple(std::vector<PyRef> items = {});
PyRef py_dict(std::vector<std::pair<PyRef, PyRef>> items = {});
PyRef py_ordered_dict(std::vector<std::pair<PyRef, PyRef>> items = {});
PyRef py_tensor(at::Tensor t);
// Appends key -> value to a dict.
void py_set(PyObj &dict, const std::string &key, PyRef value);

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
