// What a load of named tensors into a model did not match (PyTorch's _IncompatibleKeys, plus tied tensors):
// the model's keys the entries did not give, the entries' keys the model does not have, and entries that wrote
// a model tensor through another of its names (a tied weight, e.g. lm_head.weight into the token embedding)
// because the entries lacked the tensor's own name. LibTorch-free, for headers that only pass it on.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace accel {

struct LoadReport {
    std::vector<std::string> missing, unexpected;
    std::vector<std::pair<std::string, std::string>> aliased; // (entry key, model key)
    bool empty() const { return missing.empty() && unexpected.empty() && aliased.empty(); }
    // {"missing_keys": [...], "unexpected_keys": [...], "tied_keys": [{"key", "loaded_into"}]}
    std::string json() const;
    std::string text() const; // one line, for warnings and errors
};

} // namespace accel
