// Accelerate's offload folder (utils/offload.py): `index.json` maps each tensor name to {"dtype", "shape"} (NumPy's
// dtype names; bfloat16 stored as its int16 bits under the name "bfloat16") and `<name>.dat` holds the tensor's raw
// bytes, C order, native (little-endian) byte order, nothing else; a 0-d tensor is stored as one element. What
// offload_state_dict / offload_weight + save_offload_index write and load_offloaded_weight(s) read, so folders go
// both ways between accel and Python. Reading is bounded: one tensor at a time, with pread into its destination
// (no map: mapped file pages would count in the resident set while a disk-offloaded model runs).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace accel::big_modeling {

constexpr const char *kOffloadIndex = "index.json";

struct OffloadEntry {
    std::string name;
    at::ScalarType dtype = at::kFloat;
    std::vector<int64_t> shape; // empty: a 0-d tensor (one element in the file)
    int64_t numel() const;
    size_t nbytes() const;
};

// NumPy's name of a dtype as offload_weight writes it ("float32", "bfloat16", "bool", ...); INVALID_ARGUMENT
// naming `what` for a dtype NumPy cannot hold (quantized, complex32).
std::string offload_dtype_name(at::ScalarType dtype, const std::string &what);

// index.json's entries in the file's order. DATA_LOSS naming `what` for anything but an object of
// {"dtype": known name, "shape": [non-negative ints]} whose names are usable file names (no '/', NUL, "." or
// ".."). Entries of the other kind Accelerate writes ({"safetensors_file": ...}) are UNIMPLEMENTED, by name.
std::vector<OffloadEntry> parse_offload_index(const char *text, size_t len, const std::string &what);
std::string offload_index_json(const std::vector<OffloadEntry> &entries);

// offload_state_dict: writes each tensor's .dat into `dir` (created if missing), then index.json merged with the
// entries an index.json already there holds (save_offload_index: new names added, existing ones replaced).
void offload_state_dict(const std::string &dir, const std::vector<std::pair<std::string, at::Tensor>> &tensors);

// A folder opened for reading: index.json parsed and every .dat checked to exist with exactly its entry's
// bytes (DATA_LOSS naming the file otherwise). The folder's files are read again at each load: they must not
// change while it is open.
class OffloadFolder {
public:
    explicit OffloadFolder(const std::string &dir);
    const std::string &dir() const { return dir_; }
    const std::vector<OffloadEntry> &entries() const { return entries_; }
    const OffloadEntry *find(const std::string &name) const; // nullptr when absent
    // load_offloaded_weight: a new CPU tensor of the entry's dtype and shape.
    at::Tensor load(const std::string &name) const;
    // Into `dst` (the entry's shape; dtype converted as copy_ does; contiguous CPU destinations of the same
    // dtype are read straight into). NOT_FOUND / INVALID_ARGUMENT naming the tensor and the folder.
    void load_into(const std::string &name, const at::Tensor &dst) const;

private:
    const OffloadEntry &entry(const std::string &name) const;
    std::string file_of(const OffloadEntry &e) const;
    std::string dir_;
    std::vector<OffloadEntry> entries_;
};

} // namespace accel::big_modeling
