// The module tree of a model as Accelerate's big-model utilities walk it (nn.Module.named_children, named
// parameters/buffers), and Accelerate's compute_module_sizes / get_max_layer_size over it.
// accel's models have no nn.Module tree: it is derived from the state-dict names (each dotted prefix of a tensor
// name is a module) plus Model::units() (which adds parameter-less modules such as a tied lm_head or a ReLU of a
// sequential model, and gives the decoder layers their transformers class names for no_split_module_classes).
// Modules without parameters that units() does not list (transformers' dropout or rotary modules) are not in the
// tree: they hold nothing to place.
#pragma once

#include "model/model.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace accel::big_modeling {

struct ModuleNode {
    std::string name;                 // dotted path; "" for the model itself
    std::string class_name;           // transformers' class where accel knows it ("GPT2Block", "LlamaDecoderLayer")
    std::string type;                 // accel's unit type (Model::units(): "gpt_block", "embedding", ...); "" if none
    std::vector<std::string> params;  // direct parameters (full names), in order
    std::vector<std::string> buffers; // direct buffers (full names), in order
    std::vector<size_t> children;     // indexes into ModuleTree::nodes(), registration (forward) order
};

class ModuleTree {
public:
    explicit ModuleTree(const Model &model);
    const std::vector<ModuleNode> &nodes() const { return nodes_; } // nodes()[0] is the model
    // The node named `name`, or nullptr.
    const ModuleNode *find(const std::string &name) const;
    // Accelerate's find_tied_parameters: each group sorted, the parameter's own name and the other names
    // (a tied head's "lm_head.weight") that state dicts may hold.
    const std::vector<std::vector<std::string>> &tied_parameters() const { return tied_; }
    // Whether `node`'s class is one of `classes` (its transformers name or accel's unit type).
    static bool is_class(const ModuleNode &node, const std::vector<std::string> &classes);

private:
    size_t node_of(const std::string &module);
    std::vector<ModuleNode> nodes_;
    std::unordered_map<std::string, size_t> index_;
    std::vector<std::vector<std::string>> tied_;
};

// Accelerate's compute_module_sizes: bytes of every module and tensor ("" = the whole model), each tensor counted
// at min(dtype's size, its own element size) when `dtype_bits` (the bits of one element of dtype) is given. Names in first-seen order (Python's dict).
struct ModuleSizes {
    std::vector<std::string> order;
    std::unordered_map<std::string, int64_t> bytes;
    int64_t at(const std::string &name) const; // 0 for a name without tensors (Python's defaultdict)
};
ModuleSizes compute_module_sizes(const Model &model, std::optional<int32_t> dtype_bits);

// One entry of the list Accelerate's loops treat: a module of the tree or a tensor (a parameter or buffer).
struct TreeItem {
    std::string name;
    const ModuleNode *module = nullptr; // nullptr: a tensor
};

// Accelerate's get_max_layer_size: the largest "layer" among `items` (a module without children, a module of a
// no_split class, or a tensor) and the names of the layers of that size.
std::pair<int64_t, std::vector<std::string>> get_max_layer_size(const ModuleTree &tree, std::vector<TreeItem> items,
                                                                 const ModuleSizes &sizes,
                                                                 const std::vector<std::string> &no_split);

// The model's direct tensors and children as infer_auto_device_map starts from them: direct parameters, children,
// direct buffers.
std::vector<TreeItem> top_level_items(const ModuleTree &tree);
// A split module's replacements: its direct parameters, then its children (Accelerate drops its direct buffers).
std::vector<TreeItem> split_items(const ModuleTree &tree, const ModuleNode &module);

} // namespace accel::big_modeling
