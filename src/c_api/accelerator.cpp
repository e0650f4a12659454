#include <accel/accelerator.h>

#include "c_api/accelerator_access.hpp"
#include "config/env.hpp"
#include "precision/grad_scaler.hpp"
#include "random/random.hpp"

#include <cstdio>

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_accelerator_create(const char *config_json, accel_accelerator_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        emit(out, std::make_shared<accel::Accelerator>(config_json));
    });
}

ACCEL_API void accel_accelerator_free(accel_accelerator_t *accelerator) noexcept { delete accelerator; }

ACCEL_API accel_status_t accel_accelerator_get_config_json(const accel_accelerator_t *accelerator, char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        *out = owned_string(accel::config::to_json(a.config()));
    });
}

ACCEL_API accel_status_t accel_accelerator_get_device(const accel_accelerator_t *accelerator, char **out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = owned_string(acc_of(accelerator).state()->device.str());
    });
}

ACCEL_API accel_status_t accel_accelerator_prepare(accel_accelerator_t *accelerator, accel_model_t *model,
                                                   accel_optimizer_t *optimizer, accel_dataloader_t *dataloader,
                                                   accel_scheduler_t *scheduler) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        // Check everything first so that a failure leaves no object half-prepared.
        auto owner_ok = [&](const std::shared_ptr<accel::AcceleratorState> &o, const char *what) {
            if (o != nullptr && o != a.state())
                fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(what) + ": already prepared by another accelerator");
        };
        if (model) owner_ok(model->impl->prepared_by, "model");
        // An empty-init model whose weights were never loaded has nothing to train (forward_hooks: sharded or
        // dispatched models place their weights themselves).
        if (model && !model->impl->forward_hooks) model->impl->check_materialized("model");
        if (optimizer) owner_ok(optimizer->impl->prepared_by, "optimizer");
        if (dataloader) {
            owner_ok(dataloader->impl->prepared_by(), "dataloader");
            a.check_dataloader(*dataloader->impl);
        }
        if (scheduler) {
            owner_ok(scheduler->impl->prepared_by, "scheduler");
            bool optimizer_in_call = optimizer != nullptr && optimizer->impl == scheduler->impl->optimizer();
            if (!optimizer_in_call && scheduler->impl->optimizer()->prepared_by != a.state())
                fail(ACCEL_ERR_FAILED_PRECONDITION, "scheduler: its optimizer must be prepared by this accelerator "
                                                    "(pass it in the same call or prepare it first)");
        }
        // Models, optimizers and data loaders first, then schedulers (Accelerate's two passes).
        if (model) a.prepare_model(model->impl);
        if (optimizer) a.prepare_optimizer(optimizer->impl);
        if (dataloader) a.prepare_dataloader(dataloader->impl);
        if (scheduler) a.prepare_scheduler(scheduler->impl);
    });
}

ACCEL_API accel_status_t accel_accelerator_prepare_model(accel_accelerator_t *accelerator, accel_model_t *model) noexcept
{
    return guarded([&] {
        auto &m = checked(model, "model");
        if (!m.impl->forward_hooks) m.impl->check_materialized("model");
        acc_of(accelerator).prepare_model(m.impl);
    });
}

ACCEL_API accel_status_t accel_accelerator_prepare_optimizer(accel_accelerator_t *accelerator,
                                                             accel_optimizer_t *optimizer) noexcept
{
    return guarded([&] { acc_of(accelerator).prepare_optimizer(checked(optimizer, "optimizer").impl); });
}

ACCEL_API accel_status_t accel_accelerator_prepare_dataloader(accel_accelerator_t *accelerator,
                                                              accel_dataloader_t *dataloader) noexcept
{
    return guarded([&] { acc_of(accelerator).prepare_dataloader(checked(dataloader, "dataloader").impl); });
}

ACCEL_API accel_status_t accel_accelerator_prepare_scheduler(accel_accelerator_t *accelerator,
                                                             accel_scheduler_t *scheduler) noexcept
{
    return guarded([&] { acc_of(accelerator).prepare_scheduler(checked(scheduler, "scheduler").impl); });
}

ACCEL_API accel_status_t accel_accelerator_free_memory(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).free_memory(); });
}

ACCEL_API accel_status_t accel_accelerator_clear(accel_accelerator_t *accelerator) noexcept
{
    return accel_accelerator_free_memory(accelerator);
}

ACCEL_API accel_status_t accel_accelerator_unwrap_model(accel_accelerator_t *accelerator, const accel_model_t *model,
                                                        accel_model_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &a = acc_of(accelerator);
        auto &m = checked(model, "model");
        if (m.impl->prepared_by != nullptr && m.impl->prepared_by != a.state())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "model: prepared by another accelerator");
        *out = new accel_model{m.impl, true};
    });
}

ACCEL_API accel_status_t accel_accelerator_backward(accel_accelerator_t *accelerator, accel_tensor_t *loss) noexcept
{
    return guarded([&] { acc_of(accelerator).backward(checked(loss, "loss").tensor); });
}

ACCEL_API accel_status_t accel_accelerator_accumulate_begin(accel_accelerator_t *accelerator,
                                                            accel_model_t *model) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        if (model != nullptr && model->impl->prepared_by != a.state())
            fail(ACCEL_ERR_FAILED_PRECONDITION, "model: not prepared by this accelerator");
        a.accumulate_begin(model != nullptr ? model->impl.get() : nullptr);
    });
}

ACCEL_API accel_status_t accel_accelerator_accumulate_end(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).accumulate_end(); });
}

ACCEL_API accel_status_t accel_accelerator_get_sync_gradients(const accel_accelerator_t *accelerator, bool *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.state()->gradient.sync_gradients(); });
}

ACCEL_API accel_status_t accel_accelerator_get_step(const accel_accelerator_t *accelerator, int64_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.state()->step; });
}

ACCEL_API accel_status_t accel_accelerator_get_gradient_accumulation_steps(const accel_accelerator_t *accelerator,
                                                                           int64_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.state()->gradient.num_steps(); });
}

ACCEL_API accel_status_t accel_accelerator_get_end_of_dataloader(const accel_accelerator_t *accelerator,
                                                                 bool *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.state()->gradient.end_of_dataloader(); });
}

ACCEL_API accel_status_t accel_accelerator_get_mixed_precision(const accel_accelerator_t *accelerator,
                                                               accel_mixed_precision_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().mixed_precision; });
}

ACCEL_API accel_status_t accel_accelerator_optimizer_step_was_skipped(const accel_accelerator_t *accelerator,
                                                                      bool *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.optimizer_step_was_skipped(); });
}

ACCEL_API accel_status_t accel_accelerator_has_grad_scaler(const accel_accelerator_t *accelerator, bool *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.scaler() != nullptr && a.scaler()->is_enabled(); });
}

ACCEL_API accel_status_t accel_accelerator_get_grad_scale(const accel_accelerator_t *accelerator, double *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.scaler() != nullptr ? a.scaler()->get_scale() : 1.0; });
}

ACCEL_API accel_status_t accel_accelerator_get_grad_scaler_growth_tracker(const accel_accelerator_t *accelerator,
                                                                          int64_t *out) noexcept
{
    return query(accelerator, out,
                 [](auto &a) { return a.scaler() != nullptr ? a.scaler()->get_growth_tracker() : 0; });
}

ACCEL_API accel_status_t accel_accelerator_unscale_gradients(accel_accelerator_t *accelerator,
                                                             accel_optimizer_t *optimizer) noexcept
{
    return guarded([&] { acc_of(accelerator).unscale_gradients(optimizer != nullptr ? optimizer->impl.get() : nullptr); });
}

ACCEL_API accel_status_t accel_accelerator_autocast_begin(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).autocast_begin(); });
}

ACCEL_API accel_status_t accel_accelerator_autocast_end(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).autocast_end(); });
}

ACCEL_API accel_status_t accel_accelerator_clip_grad_norm(accel_accelerator_t *accelerator, accel_model_t *model,
                                                          double max_norm, double norm_type, double *out) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &m = checked(model, "model");
        if (out != nullptr) *out = 0.0;
        double norm = a.clip_grad_norm(*m.impl, max_norm, norm_type);
        if (out != nullptr) *out = norm;
    });
}

ACCEL_API accel_status_t accel_accelerator_clip_grad_value(accel_accelerator_t *accelerator, accel_model_t *model,
                                                           double clip_value) noexcept
{
    return guarded([&] { acc_of(accelerator).clip_grad_value(*checked(model, "model").impl, clip_value); });
}

ACCEL_API accel_status_t accel_accelerator_train_step(accel_accelerator_t *accelerator, accel_model_t *model,
                                                      accel_optimizer_t *optimizer, accel_scheduler_t *scheduler,
                                                      const accel_batch_t *batch, const char *loss_name,
                                                      double *out_loss) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        auto &m = checked(model, "model");
        auto &o = checked(optimizer, "optimizer");
        auto &b = checked(batch, "batch");
        accel::Loss kind = accel::parse_loss(loss_name);
        if (m.unwrapped) fail(ACCEL_ERR_INVALID_ARGUMENT, "model: pass the prepared model, not an unwrapped one");
        double loss = a.train_step(*m.impl, *o.impl, scheduler ? scheduler->impl.get() : nullptr, b.batch, kind);
        if (out_loss != nullptr) *out_loss = loss;
    });
}

ACCEL_API accel_status_t accel_accelerator_print(const accel_accelerator_t *accelerator, const char *text) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        const char *s = checked_string(text, "text");
        if (a.state()->process_index() != 0) return;
        std::fputs(s, stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
    });
}

ACCEL_API accel_status_t accel_accelerator_get_process_index(const accel_accelerator_t *accelerator,
                                                             int32_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().topology.rank; });
}

ACCEL_API accel_status_t accel_accelerator_get_local_process_index(const accel_accelerator_t *accelerator,
                                                                   int32_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().topology.local_rank; });
}

ACCEL_API accel_status_t accel_accelerator_get_num_processes(const accel_accelerator_t *accelerator,
                                                             int32_t *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().topology.world_size; });
}

ACCEL_API accel_status_t accel_accelerator_is_main_process(const accel_accelerator_t *accelerator, bool *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().topology.rank == 0; });
}

ACCEL_API accel_status_t accel_accelerator_is_local_main_process(const accel_accelerator_t *accelerator,
                                                                 bool *out) noexcept
{
    return query(accelerator, out, [](auto &a) { return a.config().topology.local_rank == 0; });
}

ACCEL_API accel_status_t accel_process_get_index(int32_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = accel::config::topology_from_env().rank;
    });
}

ACCEL_API accel_status_t accel_process_get_count(int32_t *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = accel::config::topology_from_env().world_size;
    });
}

ACCEL_API accel_status_t accel_process_is_main(bool *out) noexcept
{
    return guarded([&] {
        out_param(out);
        *out = accel::config::topology_from_env().rank == 0;
    });
}

ACCEL_API accel_status_t accel_random_set_seed(uint64_t seed, bool device_specific, bool deterministic) noexcept
{
    return guarded([&] {
        int32_t rank = device_specific ? accel::config::topology_from_env().rank : 0;
        accel::set_seed(seed + static_cast<uint64_t>(rank), deterministic);
    });
}

} // extern "C"
