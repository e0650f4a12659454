#include "big_modeling/device_map_infer.hpp"

#include "common/error.hpp"

#include <ATen/Context.h>

#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace accel::big_modeling {

using config::DeviceTarget;
using config::MaxMemory;

namespace {

bool starts_with(const std::string &s, const std::string &prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
// Python's `a in b` on strings.
bool contains(const std::string &haystack, const std::string &needle) { return haystack.find(needle) != std::string::npos; }

int64_t mem_available()
{
    std::ifstream in("/proc/meminfo");
    std::string line;
    while (std::getline(in, line))
        if (starts_with(line, "MemAvailable:")) {
            std::istringstream fields(line.substr(13));
            int64_t kib = 0;
            fields >> kib;
            return kib * 1024;
        }
    fail(ACCEL_ERR_UNAVAILABLE, "max_memory: not given, and /proc/meminfo has no MemAvailable to default to");
}

int64_t budget_of(const MaxMemory &m, const DeviceTarget &d)
{
    for (const auto &[t, b] : m)
        if (t == d) return b;
    return 0;
}

void set_entry(DeviceMap &map, const std::string &name, const DeviceTarget &d)
{
    for (auto &e : map)
        if (e.first == name) {
            e.second = d;
            return;
        }
    map.emplace_back(name, d);
}

// The modules (not tensors) among `todo`.
std::vector<TreeItem> modules_in(const std::deque<TreeItem> &todo)
{
    std::vector<TreeItem> out;
    for (const auto &i : todo)
        if (i.module != nullptr) out.push_back(i);
    return out;
}

void clean(DeviceMap &map, const std::string &module)
{
    const std::string prefix = module.empty() ? "" : module + ".";
    std::vector<size_t> inside;
    for (size_t i = 0; i < map.size(); ++i)
        if (starts_with(map[i].first, prefix)) inside.push_back(i);
    bool one_device = inside.size() > 1;
    for (size_t i : inside) one_device = one_device && map[i].second == map[inside.front()].second;
    if (one_device) {
        // One entry for the module, where its first part was (Accelerate appends it; the order carries no meaning).
        const DeviceTarget d = map[inside.front()].second;
        DeviceMap merged;
        for (size_t i = 0; i < map.size(); ++i) {
            if (i == inside.front()) merged.emplace_back(module, d);
            else if (!starts_with(map[i].first, prefix)) merged.push_back(map[i]);
        }
        map = std::move(merged);
    }
    // Then each child module (one more dotted part than `module`).
    const size_t depth = module.empty() ? 1 : static_cast<size_t>(std::count(module.begin(), module.end(), '.')) + 2;
    std::vector<std::string> children;
    for (const auto &[k, d] : map) {
        if (!starts_with(k, prefix) || k.size() <= module.size()) continue;
        size_t end = 0;
        for (size_t parts = 0; parts < depth && end != std::string::npos; ++parts)
            end = k.find('.', parts == 0 ? 0 : end + 1);
        std::string child = end == std::string::npos ? k : k.substr(0, end);
        if (std::find(children.begin(), children.end(), child) == children.end()) children.push_back(child);
    }
    for (const auto &c : children) clean(map, c);
}

} // namespace

void clean_device_map(DeviceMap &map) { clean(map, ""); }

MaxMemory get_max_memory(const std::optional<MaxMemory> &given)
{
    if (given) return *given;
    if (at::hasCUDA())
        fail(ACCEL_ERR_UNIMPLEMENTED, "max_memory: required with a GPU visible (accel does not read the GPUs' free "
                                      "memory); give each device's budget, e.g. {\"0\": \"20GiB\", \"cpu\": \"60GiB\"}");
    return {{DeviceTarget::cpu(), mem_available()}};
}

MaxMemory get_balanced_memory(const Model &model, const MaxMemory &given, const std::vector<std::string> &no_split,
                              std::optional<int32_t> dtype_bits, bool low_zero)
{
    MaxMemory max_memory = given;
    std::vector<int32_t> gpus; // with a budget > 0, by index (get_max_memory's order)
    for (const auto &[d, b] : max_memory)
        if (d.kind == DeviceTarget::Kind::gpu && b > 0) gpus.push_back(d.index);
    const int64_t num_devices = static_cast<int64_t>(gpus.size());
    if (num_devices == 0) return max_memory;
    if (num_devices == 1) low_zero = false; // (the 90% of an unset max_memory needs free GPU memory: not read here)
    const ModuleTree tree(model);
    ModuleSizes sizes = compute_module_sizes(model, dtype_bits);
    int64_t per_gpu = sizes.at("") / (low_zero ? num_devices - 1 : num_devices);
    // The buffer: the first module of each no-split class (in sizes' order), the largest of them ...
    int64_t buffer = 0;
    std::set<std::string> found;
    for (const auto &name : sizes.order) {
        if (name.empty()) continue;
        const ModuleNode *node = tree.find(name);
        if (node == nullptr) continue; // a tensor
        for (const auto &c : no_split)
            if (ModuleTree::is_class(*node, {c}) && found.insert(c).second) buffer = std::max(buffer, sizes.at(name));
        if (found.size() == std::set<std::string>(no_split.begin(), no_split.end()).size()) break;
    }
    // ... or the mean size of the innermost modules (the leaves once the tensors are set aside), if larger.
    std::set<std::string> tensors, inner;
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
        for (const auto &e : *list) tensors.insert(e.first);
    std::set<std::string> has_module_child;
    for (const auto &name : sizes.order) {
        if (tensors.count(name) != 0) continue;
        if (name.empty()) continue;
        const size_t dot = name.rfind('.');
        has_module_child.insert(dot == std::string::npos ? "" : name.substr(0, dot));
        // Every proper prefix of a module is a parent with a module child.
        for (size_t d = name.find('.'); d != std::string::npos; d = name.find('.', d + 1)) has_module_child.insert(name.substr(0, d));
    }
    int64_t leaf_sum = 0, leaves = 0;
    for (const auto &name : sizes.order)
        if (!name.empty() && tensors.count(name) == 0 && has_module_child.count(name) == 0) { // "" is never a leaf
            leaf_sum += sizes.at(name);
            ++leaves;
        }
    const int64_t mean_leaves = static_cast<int64_t>(static_cast<double>(leaf_sum) / static_cast<double>(std::max<int64_t>(leaves, 1)));
    buffer = static_cast<int64_t>(1.25 * static_cast<double>(std::max(buffer, mean_leaves)));
    per_gpu += buffer;
    // The last GPU keeps its whole budget in case the buffer is not enough.
    const int64_t gpu0 = budget_of(max_memory, DeviceTarget::gpu(0));
    for (size_t i = 0; i + 1 < gpus.size(); ++i)
        for (auto &[d, b] : max_memory)
            if (d == DeviceTarget::gpu(gpus[i])) b = std::min(low_zero && gpus[i] == 0 ? gpu0 : per_gpu, b);
    if (low_zero) {
        int64_t others = 0;
        for (int64_t i = 1; i < num_devices; ++i) others += budget_of(max_memory, DeviceTarget::gpu(static_cast<int32_t>(i)));
        const int64_t min_zero = std::max<int64_t>(0, sizes.at("") - others);
        for (auto &[d, b] : max_memory)
            if (d == DeviceTarget::gpu(0)) b = std::min(min_zero, b);
    }
    return max_memory;
}

DeviceMap infer_auto_device_map(const Model &model, const MaxMemory &max_memory, const std::vector<std::string> &no_split,
                                std::optional<int32_t> dtype_bits)
{
    std::vector<DeviceTarget> devices;
    for (const auto &e : max_memory) devices.push_back(e.first);
    if (std::find(devices.begin(), devices.end(), DeviceTarget::disk()) == devices.end())
        devices.push_back(DeviceTarget::disk());
    std::vector<DeviceTarget> main_devices;
    for (const auto &d : devices)
        if (d.kind == DeviceTarget::Kind::gpu) {
            main_devices = {d, DeviceTarget::cpu()};
            break;
        }
    if (main_devices.empty()) main_devices = {DeviceTarget::cpu()};
    auto is_main = [&](const DeviceTarget &d) {
        return std::find(main_devices.begin(), main_devices.end(), d) != main_devices.end();
    };

    const ModuleTree tree(model);
    const ModuleSizes sizes = compute_module_sizes(model, dtype_bits);
    const auto &tied_parameters = tree.tied_parameters();
    DeviceMap device_map;
    size_t current_device = 0;
    int64_t current_memory_used = 0;
    const std::vector<TreeItem> top = top_level_items(tree);
    std::deque<TreeItem> todo(top.begin(), top.end());
    // (Plain variables, not a structured binding: lambdas below assign them, which C++17 forbids for bindings.)
    int64_t max_layer_size = 0;
    std::vector<std::string> max_layer_names;
    std::tie(max_layer_size, max_layer_names) = get_max_layer_size(tree, top, sizes, no_split);
    auto update_max_layer = [&] {
        std::tie(max_layer_size, max_layer_names) = get_max_layer_size(tree, modules_in(todo), sizes, no_split);
    };
    auto index_in_todo = [&](const std::string &name) -> std::optional<size_t> {
        for (size_t i = 0; i < todo.size(); ++i)
            if (todo[i].name == name) return i;
        return std::nullopt;
    };

    while (!todo.empty()) {
        const TreeItem item = todo.front();
        todo.pop_front();
        const std::string &name = item.name;
        // The largest layer may have been this one (or inside it): find the next largest.
        max_layer_names.erase(std::remove_if(max_layer_names.begin(), max_layer_names.end(),
                                             [&](const std::string &n) { return n == name || starts_with(n, name + "."); }),
                              max_layer_names.end());
        if (max_layer_names.empty()) update_max_layer();
        const int64_t module_size = sizes.at(name);
        // Tied groups with one end in this module and one outside (Accelerate's test is a substring test).
        std::vector<std::string> tied_params;
        for (const auto &group : tied_parameters) {
            bool any = false, all = true;
            for (const auto &k : group) {
                any = any || contains(k, name);
                all = all && contains(k, name);
            }
            if (!any || all) continue;
            for (const auto &p : group)
                if (!contains(p, name)) tied_params.push_back(p);
        }
        if (current_device >= devices.size())
            fail(ACCEL_ERR_INTERNAL, "infer_auto_device_map: ran past the disk placing \"" + name + "\"");
        const DeviceTarget device = devices[current_device];
        std::optional<int64_t> current_max_size;
        if (device != DeviceTarget::disk()) current_max_size = budget_of(max_memory, device);
        if (current_max_size && is_main(device)) *current_max_size -= max_layer_size;

        auto next_device = [&] {
            ++current_device;
            todo.push_front(item);
            current_memory_used = 0;
        };
        if (current_max_size && current_memory_used + module_size > *current_max_size) {
            // Too big: split it, or go to the next device.
            if (item.module == nullptr || item.module->children.empty() || ModuleTree::is_class(*item.module, no_split)) {
                next_device();
            } else {
                const std::vector<TreeItem> parts = split_items(tree, *item.module);
                for (auto p = parts.rbegin(); p != parts.rend(); ++p) todo.push_front(*p);
                update_max_layer();
            }
        } else if (!tied_params.empty()) {
            // It fits: does it with the modules holding the other ends of its tied parameters?
            std::vector<TreeItem> tied_modules;
            std::vector<std::string> tied_with;
            for (const auto &p : tied_params)
                for (const auto &t : todo)
                    if (contains(p, t.name)) {
                        tied_modules.push_back(t);
                        tied_with.push_back(p);
                        break;
                    }
            // (A tied parameter whose module is placed already has no module left to find: Accelerate would fail
            // with an IndexError; it is left where it is.)
            int64_t with_ties = module_size;
            for (size_t i = 0; i < tied_modules.size(); ++i) with_ties += sizes.at(tied_modules[i].name) - sizes.at(tied_with[i]);
            if (!current_max_size || current_memory_used + with_ties <= *current_max_size) {
                current_memory_used += with_ties;
                set_entry(device_map, name, device);
                for (const auto &t : tied_modules) {
                    if (auto i = index_in_todo(t.name)) todo.erase(todo.begin() + static_cast<std::ptrdiff_t>(*i));
                    set_entry(device_map, t.name, device);
                }
            } else {
                // Split one of the tied modules, if one can be, or go to the next device.
                bool split = false;
                for (const auto &t : tied_modules) {
                    if (t.module == nullptr || t.module->children.empty() || ModuleTree::is_class(*t.module, no_split))
                        continue;
                    const auto i = index_in_todo(t.name);
                    if (!i) continue;
                    const std::vector<TreeItem> parts = split_items(tree, *t.module);
                    todo.erase(todo.begin() + static_cast<std::ptrdiff_t>(*i));
                    todo.insert(todo.begin() + static_cast<std::ptrdiff_t>(*i), parts.begin(), parts.end());
                    todo.push_front(item);
                    update_max_layer();
                    split = true;
                    break;
                }
                if (!split) next_device();
            }
        } else {
            current_memory_used += module_size;
            set_entry(device_map, name, device);
        }
    }
    clean_device_map(device_map);
    return device_map;
}

DeviceMap infer_auto_device_map(const Model &model, const config::InferDeviceMapOptions &options)
{
    MaxMemory max_memory = get_max_memory(options.max_memory);
    if (options.balanced)
        max_memory = get_balanced_memory(model, max_memory, options.no_split_module_classes, options.dtype_bits,
                                         options.low_zero);
    return infer_auto_device_map(model, max_memory, options.no_split_module_classes, options.dtype_bits);
}

} // namespace accel::big_modeling
