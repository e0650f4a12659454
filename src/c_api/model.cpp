#include <accel/model.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "common/out_of_memory.hpp"
#include "config/generation_config.hpp"
#include "model/generation.hpp"
#include "parallel/fsdp/zero_init.hpp"
#include "precision/autocast.hpp"

#include <ATen/core/grad_mode.h>

using accel::fail;
using namespace accel::capi;

namespace {
const accel::NamedTensors &entry_list(const accel::Model &m, size_t &index)
{
    if (index < m.named_parameters().size()) return m.named_parameters();
    index -= m.named_parameters().size();
    return m.named_buffers();
}

// The parameter called `name`, or NOT_FOUND naming it.
const at::Tensor &parameter_named(const accel::Model &m, const char *name)
{
    for (const auto &p : m.named_parameters())
        if (p.first == name) return p.second;
    fail(ACCEL_ERR_NOT_FOUND, std::string("name: the model has no parameter \"") + name + "\"");
}
} // namespace

extern "C" {

ACCEL_API accel_status_t accel_model_create_from_json(const char *spec_json, accel_model_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        // deepspeed_plugin.zero3_init_flag: built partitioned while such an accelerator lives.
        auto partitioned = accel::parallel::PartitionedAtInit::for_new_model();
        accel::ParameterFn partition;
        if (partitioned) partition = [&partitioned](const at::Tensor &p) { partitioned->partition(p); };
        auto model = accel::make_model_from_json(spec_json, partition);
        if (partitioned && partitioned->holds_any()) model->forward_hooks = partitioned;
        emit(out, std::move(model));
    });
}

ACCEL_API accel_status_t accel_model_create_from_torchscript(const char *path, accel_model_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        emit(out, accel::load_torchscript_model(checked_string(path, "path")));
    });
}

ACCEL_API void accel_model_free(accel_model_t *model) noexcept { delete model; }

namespace {

accel_status_t forward(accel_model_t *model, const accel_tensor_t *input, accel_tensor_t **out, bool grad)
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        auto &in = checked(input, "input");
        at::Tensor result;
        try {
            at::AutoGradMode mode(grad && at::GradMode::is_enabled());
            result = accel::forward(*m.impl, in.tensor, !m.unwrapped);
        } catch (const c10::Error &e) {
            accel::fail_if_out_of_memory(e.what_without_backtrace(), "input: running the model on a tensor of shape " +
                                                                         c10::str(in.tensor.sizes()));
            // LibTorch rejects an input of the wrong shape or dtype deep inside a layer: say so as an argument error.
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input: the model cannot run on a tensor of shape ") +
                                                 c10::str(in.tensor.sizes()) + " and dtype " +
                                                 c10::toString(in.tensor.scalar_type()) + ": " + e.what_without_backtrace());
        }
        *out = new_tensor(std::move(result));
    });
}

} // namespace

ACCEL_API accel_status_t accel_model_forward(accel_model_t *model, const accel_tensor_t *input,
                                             accel_tensor_t **out) noexcept
{
    return forward(model, input, out, true);
}

ACCEL_API accel_status_t accel_model_forward_no_grad(accel_model_t *model, const accel_tensor_t *input,
                                                     accel_tensor_t **out) noexcept
{
    return forward(model, input, out, false);
}

ACCEL_API accel_status_t accel_model_train(accel_model_t *model) noexcept
{
    return guarded([&] { checked(model, "model").impl->train(true); });
}

ACCEL_API accel_status_t accel_model_eval(accel_model_t *model) noexcept
{
    return guarded([&] { checked(model, "model").impl->train(false); });
}

ACCEL_API accel_status_t accel_model_is_training(const accel_model_t *model, bool *out) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        out_param(out);
        *out = m.impl->is_training();
    });
}

ACCEL_API accel_status_t accel_model_get_num_parameters(const accel_model_t *model, size_t *out) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        out_param(out);
        *out = m.impl->named_parameters().size();
    });
}

ACCEL_API accel_status_t accel_model_get_parameter_numel(const accel_model_t *model, int64_t *out) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        out_param(out);
        for (const auto &p : m.impl->named_parameters()) *out += p.second.numel();
    });
}

ACCEL_API accel_status_t accel_model_get_parameter_name(const accel_model_t *model, size_t index,
                                                        const char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        const auto &params = m.impl->named_parameters();
        if (index >= params.size())
            fail(ACCEL_ERR_OUT_OF_RANGE, "index: the model has " + std::to_string(params.size()) + " parameters, got " +
                                             std::to_string(index));
        *out = params[index].first.c_str();
    });
}

ACCEL_API accel_status_t accel_model_get_tensor(const accel_model_t *model, const char *name,
                                                accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        const char *key = checked_string(name, "name");
        const at::Tensor *t = m.impl->find_tensor(key);
        if (t == nullptr) fail(ACCEL_ERR_NOT_FOUND, std::string("name: the model has no tensor \"") + key + "\"");
        m.impl->check_tensor_access("model");
        *out = new_tensor(t->detach().clone());
    });
}

ACCEL_API accel_status_t accel_model_get_gradient(const accel_model_t *model, const char *name,
                                                  accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        const at::Tensor &p = parameter_named(*m.impl, checked_string(name, "name"));
        if (p.grad().defined()) *out = new_tensor(p.grad().detach().clone());
    });
}

ACCEL_API accel_status_t accel_model_set_requires_grad(accel_model_t *model, const char *name_glob,
                                                       bool requires_grad) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        m.impl->set_requires_grad(checked_string(name_glob, "name_glob"), requires_grad);
    });
}

ACCEL_API accel_status_t accel_model_get_requires_grad(const accel_model_t *model, const char *name, bool *out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        *out = parameter_named(*m.impl, checked_string(name, "name")).requires_grad();
    });
}

ACCEL_API accel_status_t accel_model_get_state_dict_size(const accel_model_t *model, size_t *out) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        out_param(out);
        *out = m.impl->named_parameters().size() + m.impl->named_buffers().size();
    });
}

ACCEL_API accel_status_t accel_model_get_state_dict_key(const accel_model_t *model, size_t index,
                                                        const char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        const size_t size = m.impl->named_parameters().size() + m.impl->named_buffers().size();
        if (index >= size)
            fail(ACCEL_ERR_OUT_OF_RANGE, "index: the state dict has " + std::to_string(size) + " entries, got " +
                                             std::to_string(index));
        size_t i = index;
        *out = entry_list(*m.impl, i)[i].first.c_str();
    });
}

ACCEL_API accel_status_t accel_model_load_state_dict(accel_model_t *model, const char *const *keys,
                                                     const accel_tensor_t *const *tensors, size_t count,
                                                     bool strict) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        if (count > 0 && keys == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "keys: must not be NULL when count > 0");
        if (count > 0 && tensors == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "tensors: must not be NULL when count > 0");
        accel::NamedTensors entries;
        for (size_t i = 0; i < count; ++i) {
            if (keys[i] == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, "keys[" + std::to_string(i) + "]: must not be NULL");
            if (tensors[i] == nullptr)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "tensors[" + std::to_string(i) + "]: must not be NULL");
            entries.emplace_back(keys[i], tensors[i]->tensor);
        }
        m.impl->check_tensor_access("model", /*loading=*/true);
        m.impl->load_state_dict(entries, strict);
    });
}

ACCEL_API accel_status_t accel_model_generate(accel_model_t *model, const accel_tensor_t *input_ids,
                                              const char *options_json, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        auto &ids = checked(input_ids, "input_ids");
        auto options = accel::config::parse_generation_config(options_json);
        *out = new_tensor(accel::generate(*m.impl, ids.tensor, options, !m.unwrapped));
    });
}

} // extern "C"
