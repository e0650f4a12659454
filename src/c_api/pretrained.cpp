// accel_model_from_pretrained / accel_model_save_pretrained (include/accel/model.h): transformers'
// PreTrainedModel methods over Hugging Face folders (src/model/pretrained.hpp).
#include <accel/model.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "accelerator/accelerator.hpp"
#include "config/env.hpp"
#include "common/files.hpp"
#include "config/pretrained_config.hpp"
#include "logging/logger.hpp"
#include "model/lora.hpp"
#include "model/pretrained.hpp"

#include <cstdio>

using accel::fail;
using namespace accel::capi;

namespace {

accel_status_t from_pretrained(const char *path, const char *options_json, accel_model_t **out, char **out_report)
{
    return guarded([&] {
        if (out_report != nullptr) *out_report = nullptr;
        out_param(out);
        const char *p = checked_string(path, "path");
        if (p[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "path: must not be empty");
        const auto options = accel::config::parse_from_pretrained_options(options_json, "options_json");
        accel::PretrainedModel loaded = accel::from_pretrained(p, options);
        // Not strict: what did not match is said on the main process, as transformers' loading warns.
        if (!loaded.report.empty())
            accel::logging::warning(std::string("from_pretrained: ") + p + ": " + loaded.report.text());
        if (out_report != nullptr) *out_report = owned_string(loaded.report.json());
        emit(out, std::move(loaded.model));
    });
}

} // namespace

extern "C" {

ACCEL_API accel_status_t accel_model_from_pretrained(const char *path, const char *options_json,
                                                     accel_model_t **out) noexcept
{
    return from_pretrained(path, options_json, out, nullptr);
}

ACCEL_API accel_status_t accel_model_from_pretrained_with_report(const char *path, const char *options_json,
                                                                 accel_model_t **out, char **out_report) noexcept
{
    if (out_report == nullptr) return guarded([] { fail(ACCEL_ERR_INVALID_ARGUMENT, "out_report: must not be NULL"); });
    return from_pretrained(path, options_json, out, out_report);
}

ACCEL_API accel_status_t accel_model_save_pretrained(accel_model_t *model, const char *path,
                                                     const char *options_json) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        const char *p = checked_string(path, "path");
        if (p[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "path: must not be empty");
        const auto options = accel::config::parse_save_pretrained_options(options_json, "options_json");
        // Checked on every process (only the main one writes).
        if ((options.weights.adapter_only || options.weights.merge) && !accel::has_lora(*m.impl))
            fail(ACCEL_ERR_FAILED_PRECONDITION, std::string("options_json.") +
                                                    (options.weights.adapter_only ? "adapter_only" : "merge") +
                                                    ": the model has no LoRA adapters (give its spec or from_pretrained's "
                                                    "options a \"lora\" object)");
        if (m.impl->hf_config_json().empty())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "model: has no Hugging Face counterpart (save_pretrained writes \"gpt\" "
                                                "and \"llama\" models); accel_accelerator_save_model writes its weights");
        // A prepared model is gathered on the main process by its accelerator (every process calls this, as
        // with save_model); an unprepared one is whole here.
        if (const auto &state = m.impl->prepared_by) {
            if (state->accelerator == nullptr)
                fail(ACCEL_ERR_FAILED_PRECONDITION, "model: the accelerator that prepared it was freed");
            state->accelerator->save_model(*m.impl, p, options.weights);
            return;
        }
        m.impl->check_tensor_access("save_pretrained");
        const std::string dir = accel::normalize_path(p);
        if (accel::exists(dir) && !accel::is_dir(dir))
            fail(ACCEL_ERR_ALREADY_EXISTS, "path: \"" + dir + "\" is a file, not a folder");
        accel::write_pretrained(*m.impl, dir, options.weights);
    });
}

} // extern "C"
