// accel_accelerator_get_state_dict and the accel_state_dict_t it hands out (accel/checkpoint.h).
#include <accel/checkpoint.h>

#include "c_api/accelerator_access.hpp"
#include "config/checkpoint_options.hpp"

#include <string>
#include <utility>

struct accel_state_dict {
    accel::NamedTensors entries;
};

using accel::fail;
using namespace accel::capi;

namespace {
const std::pair<std::string, at::Tensor> &entry(const accel_state_dict_t *state_dict, size_t index)
{
    const auto &sd = checked(state_dict, "state_dict");
    if (index >= sd.entries.size())
        fail(ACCEL_ERR_OUT_OF_RANGE, "index: " + std::to_string(index) + " is beyond the state dict's " +
                                         std::to_string(sd.entries.size()) + " entries");
    return sd.entries[index];
}
} // namespace

extern "C" {

ACCEL_API accel_status_t accel_accelerator_get_state_dict(accel_accelerator_t *accelerator, const accel_model_t *model,
                                                         const char *options_json, accel_state_dict_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        const auto &m = checked(model, "model");
        const auto options = accel::config::parse_get_state_dict_options(options_json, "options_json");
        *out = new accel_state_dict_t{a.get_state_dict(*m.impl, options)};
    });
}

ACCEL_API accel_status_t accel_state_dict_get_count(const accel_state_dict_t *state_dict, size_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = checked(state_dict, "state_dict").entries.size();
    });
}

ACCEL_API accel_status_t accel_state_dict_get_key(const accel_state_dict_t *state_dict, size_t index,
                                                 const char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = entry(state_dict, index).first.c_str();
    });
}

ACCEL_API accel_status_t accel_state_dict_get_tensor(const accel_state_dict_t *state_dict, size_t index,
                                                    accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = new_tensor(entry(state_dict, index).second);
    });
}

ACCEL_API void accel_state_dict_free(accel_state_dict_t *state_dict) noexcept { delete state_dict; }

} // extern "C"
