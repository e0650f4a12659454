#include <accel/big_modeling.h>

#include "big_modeling/device_map_infer.hpp"
#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "config/device_map.hpp"

using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_model_infer_auto_device_map(const accel_model_t *model, const char *options_json,
                                                           char **map_json) noexcept
{
    return guarded([&] {
        out_param(map_json, "map_json");
        const auto &m = checked(model, "model");
        const auto options = accel::config::parse_infer_device_map_options(options_json, "options_json");
        *map_json = owned_string(accel::config::device_map_to_json(accel::big_modeling::infer_auto_device_map(*m.impl, options)));
    });
}

ACCEL_API accel_status_t accel_model_compute_module_sizes(const accel_model_t *model, const char *options_json,
                                                          char **sizes_json) noexcept
{
    return guarded([&] {
        out_param(sizes_json, "sizes_json");
        const auto &m = checked(model, "model");
        const auto options = accel::config::parse_module_sizes_options(options_json, "options_json");
        namespace bm = accel::big_modeling;
        const bm::ModuleSizes sizes = bm::compute_module_sizes(*m.impl, options.dtype_bits);
        const bm::ModuleTree tree(*m.impl);
        const auto [max_size, max_names] =
            bm::get_max_layer_size(tree, bm::top_level_items(tree), sizes, options.no_split_module_classes);
        std::vector<std::pair<std::string, int64_t>> ordered;
        for (const auto &name : sizes.order) ordered.emplace_back(name, sizes.at(name));
        *sizes_json = owned_string(accel::config::module_sizes_to_json(ordered, max_size, max_names));
    });
}

ACCEL_API accel_status_t accel_model_check_device_map(const accel_model_t *model, const char *device_map_json) noexcept
{
    return guarded([&] {
        const auto &m = checked(model, "model");
        accel::big_modeling::check_device_map(
            *m.impl, accel::config::parse_device_map(device_map_json, "device_map_json"), "device_map_json");
    });
}

} // extern "C"
