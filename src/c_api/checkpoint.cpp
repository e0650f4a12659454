#include <accel/checkpoint.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "accelerator/accelerator.hpp"
#include "checkpointing/checkpointing.hpp"
#include "common/files.hpp"
#include "config/checkpoint_options.hpp"
#include "config/env.hpp"
#include "logging/logger.hpp"

#include <cstdio>

using accel::fail;
using namespace accel::capi;

namespace {
accel::Accelerator &acc_of(accel_accelerator_t *a) { return *checked(a, "accelerator").impl; }

const char *optional_path(const char *p, const char *name)
{
    if (p != nullptr && p[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(name) + ": must not be empty");
    return p;
}

void check_model_owner(accel::Accelerator &a, const accel_model_t &m)
{
    if (m.impl->prepared_by != nullptr && m.impl->prepared_by != a.state())
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: prepared by another accelerator");
}

std::string status_text(accel_status_t st) { return accel_status_name(st); }
} // namespace

extern "C" {

ACCEL_API accel_status_t accel_accelerator_save_state(accel_accelerator_t *accelerator, const char *output_dir) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        a.save_state(optional_path(output_dir, "output_dir"), {});
    });
}

ACCEL_API accel_status_t accel_accelerator_load_state(accel_accelerator_t *accelerator, const char *input_dir) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        a.load_state(optional_path(input_dir, "input_dir"), {});
    });
}

ACCEL_API accel_status_t accel_accelerator_save_state_with_options(accel_accelerator_t *accelerator,
                                                                   const char *output_dir, const char *options_json,
                                                                   char **out_dir) noexcept
{
    return guarded([&] {
        if (out_dir != nullptr) *out_dir = nullptr;
        auto &a = acc_of(accelerator);
        auto opts = accel::config::parse_save_state_options(options_json, "options_json");
        std::string dir = a.save_state(optional_path(output_dir, "output_dir"), opts);
        if (out_dir != nullptr) *out_dir = owned_string(dir);
    });
}

ACCEL_API accel_status_t accel_accelerator_wait_for_checkpoint(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).wait_for_checkpoint(); });
}

ACCEL_API accel_status_t accel_accelerator_load_state_with_options(accel_accelerator_t *accelerator,
                                                                   const char *input_dir, const char *options_json,
                                                                   char **out_dir) noexcept
{
    return guarded([&] {
        if (out_dir != nullptr) *out_dir = nullptr;
        auto &a = acc_of(accelerator);
        auto opts = accel::config::parse_load_state_options(options_json, "options_json");
        std::string dir = a.load_state(optional_path(input_dir, "input_dir"), opts);
        if (out_dir != nullptr) *out_dir = owned_string(dir);
    });
}

ACCEL_API accel_status_t accel_checkpoint_merge_weights(const char *checkpoint_dir, const char *output_path,
                                                        const char *options_json, char **out_path,
                                                        int64_t *out_count) noexcept
{
    return guarded([&] {
        if (out_path != nullptr) *out_path = nullptr;
        if (out_count != nullptr) *out_count = 0;
        const char *in = checked_string(checkpoint_dir, "checkpoint_dir");
        const char *out = checked_string(output_path, "output_path");
        if (in[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "checkpoint_dir: must not be empty");
        if (out[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "output_path: must not be empty");
        const auto opts = accel::config::parse_merge_weights_options(options_json, "options_json");
        const std::string input = accel::normalize_path(in);
        std::string output = accel::normalize_path(out);
        auto ends_with = [&output](const std::string &ext) {
            return output.size() > ext.size() && output.compare(output.size() - ext.size(), ext.size(), ext) == 0;
        };
        const std::string ext = opts.safe_serialization ? ".safetensors" : ".bin";
        if (ends_with(".safetensors") || ends_with(".bin")) {
            if (!ends_with(ext))
                fail(ACCEL_ERR_INVALID_ARGUMENT, "output_path: \"" + output + "\" does not end in " + ext + ", which " +
                                                     (opts.safe_serialization ? "safe_serialization" : "pickle output") +
                                                     " writes");
        } else {
            accel::make_dirs(output);
            output = accel::join(output, opts.safe_serialization ? "model.safetensors" : "pytorch_model.bin");
        }
        if (opts.remove_checkpoint_dir && (output + "/").rfind(input + "/", 0) == 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "options_json.remove_checkpoint_dir: the output \"" + output +
                                                 "\" lies inside checkpoint_dir, which would be deleted");
        const size_t n = accel::ckpt::merge_weights(input, output, opts.safe_serialization);
        if (opts.remove_checkpoint_dir) accel::remove_all(input);
        if (out_count != nullptr) *out_count = static_cast<int64_t>(n);
        if (out_path != nullptr) *out_path = owned_string(output);
    });
}

ACCEL_API accel_status_t accel_accelerator_save_model(accel_accelerator_t *accelerator, const accel_model_t *model,
                                                      const char *save_directory, const char *options_json) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        const auto &m = checked(model, "model");
        const char *dir = checked_string(save_directory, "save_directory");
        if (dir[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "save_directory: must not be empty");
        check_model_owner(a, m);
        auto opts = accel::config::parse_save_model_options(options_json, "options_json");
        a.save_model(*m.impl, dir, opts);
    });
}

namespace {

// Both load_checkpoint entry points: what did not match is printed on the main process (the launcher's rank 0)
// and handed back as JSON when asked for.
accel_status_t load_checkpoint(accel_model_t *model, const char *path, const char *options_json, char **out_report)
{
    return guarded([&] {
        if (out_report != nullptr) *out_report = nullptr;
        auto &m = checked(model, "model");
        const char *p = checked_string(path, "path");
        if (p[0] == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, "path: must not be empty");
        auto opts = accel::config::parse_load_checkpoint_options(options_json, "options_json");
        m.impl->check_tensor_access("load_checkpoint", /*loading=*/true);
        const accel::LoadReport report = accel::load_checkpoint_in_model(*m.impl, p, opts);
        if (!report.empty()) accel::logging::warning(std::string("load_checkpoint: ") + p + ": " + report.text());
        if (out_report != nullptr) *out_report = owned_string(report.json());
    });
}

} // namespace

ACCEL_API accel_status_t accel_model_load_checkpoint(accel_model_t *model, const char *path,
                                                     const char *options_json) noexcept
{
    return load_checkpoint(model, path, options_json, nullptr);
}

ACCEL_API accel_status_t accel_model_load_checkpoint_with_report(accel_model_t *model, const char *path,
                                                                 const char *options_json, char **out_report) noexcept
{
    if (out_report == nullptr)
        return guarded([] { fail(ACCEL_ERR_INVALID_ARGUMENT, "out_report: must not be NULL"); });
    return load_checkpoint(model, path, options_json, out_report);
}

ACCEL_API accel_status_t accel_accelerator_register_for_checkpointing(accel_accelerator_t *accelerator,
                                                                      accel_checkpoint_save_fn_t save_fn,
                                                                      accel_checkpoint_load_fn_t load_fn,
                                                                      void *user_data, int32_t *out_index) noexcept
{
    return guarded([&] {
        out_param(out_index, "out_index");
        auto &a = acc_of(accelerator);
        if (save_fn == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "save_fn: must not be NULL");
        if (load_fn == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "load_fn: must not be NULL");
        const size_t index = a.custom_objects().size();
        accel::CheckpointObject obj;
        obj.save = [save_fn, user_data, index]() {
            const uint8_t *data = nullptr;
            size_t len = 0;
            accel_status_t st = save_fn(user_data, &data, &len);
            if (st != ACCEL_OK)
                fail(st, "save_state: the save callback of custom object " + std::to_string(index) + " returned " +
                             status_text(st));
            if (data == nullptr && len != 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "save_state: the save callback of custom object " +
                                                     std::to_string(index) + " returned NULL data with length " +
                                                     std::to_string(len));
            return std::string(reinterpret_cast<const char *>(data), len);
        };
        obj.load = [load_fn, user_data, index](const std::string &bytes) {
            accel_status_t st = load_fn(user_data, reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
            if (st != ACCEL_OK)
                fail(st, "load_state: the load callback of custom object " + std::to_string(index) + " returned " +
                             status_text(st));
        };
        *out_index = static_cast<int32_t>(a.register_for_checkpointing(std::move(obj)));
    });
}

ACCEL_API accel_status_t accel_accelerator_register_bytes_for_checkpointing(accel_accelerator_t *accelerator,
                                                                            const uint8_t *data, size_t len,
                                                                            int32_t *out_index) noexcept
{
    return guarded([&] {
        out_param(out_index, "out_index");
        auto &a = acc_of(accelerator);
        if (data == nullptr && len != 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "data: must not be NULL when len > 0");
        auto blob = std::make_shared<std::string>(reinterpret_cast<const char *>(data), data ? len : 0);
        accel::CheckpointObject obj;
        obj.blob = blob;
        obj.save = [blob]() { return *blob; };
        obj.load = [blob](const std::string &bytes) { *blob = bytes; };
        *out_index = static_cast<int32_t>(a.register_for_checkpointing(std::move(obj)));
    });
}

ACCEL_API accel_status_t accel_accelerator_get_checkpointing_bytes(const accel_accelerator_t *accelerator,
                                                                   int32_t index, const uint8_t **out_data,
                                                                   size_t *out_len) noexcept
{
    return guarded([&] {
        out_param(out_data, "out_data");
        out_param(out_len, "out_len");
        auto &a = *checked(accelerator, "accelerator").impl;
        auto &objs = a.custom_objects();
        if (index < 0 || static_cast<size_t>(index) >= objs.size())
            fail(ACCEL_ERR_OUT_OF_RANGE, "index: " + std::to_string(index) + " is not a registered object (" +
                                             std::to_string(objs.size()) + " registered)");
        const auto &obj = objs[static_cast<size_t>(index)];
        if (!obj.blob)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "index: object " + std::to_string(index) +
                                                 " was registered with callbacks, not as bytes");
        *out_data = reinterpret_cast<const uint8_t *>(obj.blob->data());
        *out_len = obj.blob->size();
    });
}

ACCEL_API accel_status_t accel_accelerator_get_project_iteration(const accel_accelerator_t *accelerator,
                                                                 int64_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = checked(accelerator, "accelerator").impl->project_iteration();
    });
}

} // extern "C"
