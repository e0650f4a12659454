// State dicts: the plain values and tensors that each part of a training run saves and restores
// (Python's `obj.state_dict()` / `obj.load_state_dict()`). Every part that has state (optimizer,
// scheduler, data loader, gradient scaler, random generators, models) turns its state into such a tree
// and reads it back; the Accelerator collects them and src/checkpointing/ writes them as files (torch
// pickles, safetensors) without knowing what they mean. The tree mirrors Python objects one to one, so
// what a part returns is exactly what Python's torch.save / torch.load see.
//
// Loading is two-phase everywhere, so that a damaged or mismatched checkpoint changes nothing: a part's
// load_state_dict checks the whole tree first (DATA_LOSS for malformed content naming `what`,
// INVALID_ARGUMENT when it does not fit this object) and returns an ApplyState that installs it; the
// Accelerator runs every part's checks before it runs any ApplyState.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel {

struct PyObj;
using PyRef = std::shared_ptr<PyObj>;

// A Python value: None, bool, int, float, str, bytes, list, tuple, dict (insertion order), tensor; and,
// only as read from or written to pickles, globals and storages (NumPy objects: checkpointing/pickle.hpp).
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
// An object made by calling a global with `args` (pickled as GLOBAL + REDUCE), for the few classes a
// checkpoint layout needs (checkpointing/pickle.hpp lists them): torch.Size((2, 3)), set([]), ...
PyRef py_call(std::string global, std::vector<PyRef> args);
// Appends key -> value to a dict.
void py_set(PyObj &dict, const std::string &key, PyRef value);

// A model's weights by state-dict key.
using TensorList = std::vector<std::pair<std::string, at::Tensor>>;

// Sharded state dicts (fsdp_plugin's SHARDED_STATE_DICT): each rank keeps its piece of every sharded
// tensor, elements [offset, offset + numel) of the flattened tensor.
struct TensorPiece {
    int32_t rank = 0;
    int64_t offset = 0;
    int64_t numel = 0;
};
struct ShardedTensor {
    std::string name;
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape;
    std::vector<TensorPiece> pieces; // every rank's (numel > 0 only), by offset
    at::Tensor local;                // this rank's piece, 1-D; undefined when it holds none
};
struct ShardedState {
    std::vector<ShardedTensor> tensors; // in state-dict order
    PyRef rest;                         // the state that is not per element (null when there is none)
    int32_t world_size = 1;             // the ranks the pieces are spread over
    int32_t rank = 0;                   // this process's rank among them
};

// A sharded state dict read by ranges (SHARDED_STATE_DICT loads): its tensors' names in saved order, `find`
// (false when absent; the shape otherwise), `dtype`, and `read`, which fills `dst` (contiguous) with the
// elements [offset, offset + dst.numel()) of a tensor's flattened data, converted to dst's dtype.
struct ShardedSource {
    std::function<std::vector<std::string>()> names;
    std::function<bool(const std::string &name, std::vector<int64_t> &shape)> find;
    std::function<at::ScalarType(const std::string &name)> dtype;
    std::function<void(const std::string &name, int64_t offset, const at::Tensor &dst)> read;
};

// Installs a state that load_state_dict has checked (see the top of this file).
using ApplyState = std::function<void()>;
// Schedules dst.copy_(src) to run later, batched with the other copies of a load (checkpointing's
// CopyBatch reads file-backed sources straight into `dst`).
using CopyFn = std::function<void(const at::Tensor &dst, const at::Tensor &src)>;

// Readers for load_state_dict: each fails with DATA_LOSS "<what>: \"key\" ..." when the key is missing
// or of the wrong type. Numbers accept Python ints and floats.
const PyObj &sd_dict(const PyObj *v, const std::string &what);
int64_t sd_int(const PyObj &dict, const char *key, const std::string &what);
double sd_number(const PyObj &dict, const char *key, const std::string &what);
bool sd_bool(const PyObj &dict, const char *key, const std::string &what);
// A list of numbers of exactly `n` entries (INVALID_ARGUMENT naming both counts when the length differs).
std::vector<double> sd_numbers(const PyObj &dict, const char *key, const std::string &what, size_t n);
// A Python int or float, or a one-element tensor (PyTorch 1.13 keeps an optimizer's "step" as one), as a
// double; nullopt for anything else.
std::optional<double> py_number(const PyObj &v);

} // namespace accel
