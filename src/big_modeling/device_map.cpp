#include "big_modeling/device_map.hpp"

#include "common/error.hpp"
#include "model/model.hpp"

namespace accel::big_modeling {

namespace {
// `name` is `module` or inside it ("" holds everything).
bool within(const std::string &name, const std::string &module)
{
    if (module.empty()) return true;
    return name.size() >= module.size() && name.compare(0, module.size(), module) == 0 &&
           (name.size() == module.size() || name[module.size()] == '.');
}
} // namespace

const DeviceTarget *device_for(const DeviceMap &map, const std::string &tensor_name)
{
    const DeviceTarget *best = nullptr;
    size_t best_len = 0;
    for (const auto &[module, target] : map) {
        if (!within(tensor_name, module)) continue;
        if (best == nullptr || module.size() > best_len) {
            best = &target;
            best_len = module.size();
        }
    }
    return best;
}

void check_device_map(const Model &model, const DeviceMap &map, const std::string &what)
{
    std::vector<std::string> names;
    for (const auto &[n, t] : model.named_parameters()) names.push_back(n);
    for (const auto &[n, t] : model.named_buffers()) names.push_back(n);
    std::string uncovered;
    for (const auto &n : names)
        if (device_for(map, n) == nullptr) uncovered += (uncovered.empty() ? "" : ", ") + n;
    if (!uncovered.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             what + " does not give any device for the following parameters: " + uncovered);
}

} // namespace accel::big_modeling
