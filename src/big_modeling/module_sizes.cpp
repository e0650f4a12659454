#include "big_modeling/module_sizes.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

namespace accel::big_modeling {

namespace {
// transformers' class of an accel unit type, where the names differ (Llama-family units already carry theirs).
std::string class_of_type(const std::string &type) { return type == "gpt_block" ? "GPT2Block" : type; }

std::string parent_of(const std::string &name)
{
    const size_t dot = name.rfind('.');
    return dot == std::string::npos ? std::string() : name.substr(0, dot);
}
} // namespace

size_t ModuleTree::node_of(const std::string &module)
{
    auto it = index_.find(module);
    if (it != index_.end()) return it->second;
    const size_t parent = node_of(parent_of(module));
    const size_t n = nodes_.size();
    nodes_.push_back(ModuleNode{module, "", "", {}, {}, {}});
    nodes_[parent].children.push_back(n);
    index_.emplace(module, n);
    return n;
}

ModuleTree::ModuleTree(const Model &model)
{
    nodes_.push_back(ModuleNode{});
    index_.emplace("", 0);
    std::set<std::string> parameters, placed;
    for (const auto &p : model.named_parameters()) parameters.insert(p.first);
    auto add = [&](const std::string &name, bool buffer) {
        ModuleNode &owner = nodes_[node_of(parent_of(name))];
        (buffer ? owner.buffers : owner.params).push_back(name);
    };
    // Units first: they give the order of parameter-less modules among the others, and the layers' classes.
    const std::vector<ModuleUnit> units = model.units();
    for (const auto &u : units) {
        if (!u.name.empty()) {
            ModuleNode &node = nodes_[node_of(u.name)];
            node.type = u.type;
            node.class_name = class_of_type(u.type);
        }
        for (const auto &p : u.parameter_names)
            if (parameters.count(p) != 0 && placed.insert(p).second) add(p, false);
    }
    for (const auto &p : model.named_parameters())
        if (placed.insert(p.first).second) add(p.first, false);
    for (const auto &b : model.named_buffers()) add(b.first, true);
    // Tied weights: a unit without parameters of its own whose weight is another parameter (a tied lm_head).
    std::map<std::string, std::set<std::string>> tied;
    for (const auto &u : units) {
        if (u.name.empty() || !u.parameter_names.empty()) continue;
        const std::string key = u.name + ".weight";
        const at::Tensor *t = model.find_tensor(key);
        if (t == nullptr) continue;
        for (const auto &p : model.named_parameters())
            if (p.second.unsafeGetTensorImpl() == t->unsafeGetTensorImpl() && p.first != key) {
                tied[p.first].insert(key);
                break;
            }
    }
    for (const auto &[owner, others] : tied) {
        std::vector<std::string> group{owner};
        group.insert(group.end(), others.begin(), others.end());
        std::sort(group.begin(), group.end());
        tied_.push_back(std::move(group));
    }
}

const ModuleNode *ModuleTree::find(const std::string &name) const
{
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &nodes_[it->second];
}

bool ModuleTree::is_class(const ModuleNode &node, const std::vector<std::string> &classes)
{
    for (const auto &c : classes)
        if ((!node.class_name.empty() && c == node.class_name) || (!node.type.empty() && c == node.type)) return true;
    return false;
}

int64_t ModuleSizes::at(const std::string &name) const
{
    auto it = bytes.find(name);
    return it == bytes.end() ? 0 : it->second;
}

ModuleSizes compute_module_sizes(const Model &model, std::optional<int32_t> dtype_bits)
{
    ModuleSizes out;
    auto count = [&](const std::string &name, const at::Tensor &t) {
        if (!t.defined()) return;
        // Accelerate's dtype_byte_size: bool is 1/8 byte (counted per tensor, rounded up here).
        int64_t b = t.scalar_type() == at::kBool ? 1 : 8 * static_cast<int64_t>(t.element_size());
        if (dtype_bits) b = std::min<int64_t>(b, *dtype_bits);
        const int64_t size = (t.numel() * b + 7) / 8;
        // Every dotted prefix of the name ("" first) and the name itself, as Accelerate's name_parts[:idx].
        auto add = [&](const std::string &prefix) {
            auto [it, fresh] = out.bytes.emplace(prefix, 0);
            if (fresh) out.order.push_back(prefix);
            it->second += size;
        };
        add("");
        for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1)) add(name.substr(0, dot));
        add(name);
    };
    for (const auto &p : model.named_parameters()) count(p.first, p.second);
    for (const auto &b : model.named_buffers()) count(b.first, b.second);
    return out;
}

std::pair<int64_t, std::vector<std::string>> get_max_layer_size(const ModuleTree &tree, std::vector<TreeItem> items,
                                                                 const ModuleSizes &sizes,
                                                                 const std::vector<std::string> &no_split)
{
    int64_t max_size = 0;
    std::vector<std::string> names;
    std::deque<TreeItem> queue(items.begin(), items.end());
    while (!queue.empty()) {
        TreeItem item = queue.front();
        queue.pop_front();
        if (item.module == nullptr || item.module->children.empty() || ModuleTree::is_class(*item.module, no_split)) {
            const int64_t size = sizes.at(item.name);
            if (size > max_size) {
                max_size = size;
                names = {item.name};
            } else if (size == max_size) {
                names.push_back(item.name);
            }
        } else {
            const auto &children = item.module->children;
            for (auto c = children.rbegin(); c != children.rend(); ++c)
                queue.push_front({tree.nodes()[*c].name, &tree.nodes()[*c]});
        }
    }
    return {max_size, names};
}

std::vector<TreeItem> top_level_items(const ModuleTree &tree)
{
    const ModuleNode &root = tree.nodes()[0];
    std::vector<TreeItem> out;
    for (const auto &p : root.params) out.push_back({p, nullptr});
    for (size_t c : root.children) out.push_back({tree.nodes()[c].name, &tree.nodes()[c]});
    for (const auto &b : root.buffers) out.push_back({b, nullptr});
    return out;
}

std::vector<TreeItem> split_items(const ModuleTree &tree, const ModuleNode &module)
{
    std::vector<TreeItem> out;
    for (const auto &p : module.params) out.push_back({p, nullptr});
    for (size_t c : module.children) out.push_back({tree.nodes()[c].name, &tree.nodes()[c]});
    return out;
}

} // namespace accel::big_modeling
