#include <accel/optimizer.h>
#include <accel/scheduler.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "config/scheduler_config.hpp"

#include <cmath>

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_optimizer_create(accel_model_t *model, const char *config_json,
                                                accel_optimizer_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &m = checked(model, "model");
        auto config = accel::config::parse_optimizer_config(config_json);
        emit(out, std::make_shared<accel::AcceleratedOptimizer>(m.impl, config));
    });
}

ACCEL_API void accel_optimizer_free(accel_optimizer_t *optimizer) noexcept { delete optimizer; }

ACCEL_API accel_status_t accel_optimizer_step(accel_optimizer_t *optimizer) noexcept
{
    return guarded([&] { checked(optimizer, "optimizer").impl->step(); });
}

ACCEL_API accel_status_t accel_optimizer_zero_grad(accel_optimizer_t *optimizer) noexcept
{
    return guarded([&] { checked(optimizer, "optimizer").impl->zero_grad(); });
}

ACCEL_API accel_status_t accel_optimizer_get_lr(const accel_optimizer_t *optimizer, double *out) noexcept
{
    return guarded([&] {
        auto &o = checked(optimizer, "optimizer");
        out_param(out);
        *out = o.impl->lr(0);
    });
}

ACCEL_API accel_status_t accel_optimizer_set_lr(accel_optimizer_t *optimizer, double lr) noexcept
{
    return guarded([&] {
        auto &o = checked(optimizer, "optimizer");
        if (!std::isfinite(lr) || lr < 0.0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "lr: expected a finite number >= 0, got " + std::to_string(lr));
        for (size_t g = 0; g < o.impl->num_param_groups(); ++g) o.impl->set_lr(lr, g);
    });
}

ACCEL_API accel_status_t accel_optimizer_get_step_was_skipped(const accel_optimizer_t *optimizer, bool *out) noexcept
{
    return guarded([&] {
        auto &o = checked(optimizer, "optimizer");
        out_param(out);
        *out = o.impl->step_was_skipped();
    });
}

ACCEL_API accel_status_t accel_scheduler_create(accel_optimizer_t *optimizer, const char *config_json,
                                                accel_scheduler_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        auto &o = checked(optimizer, "optimizer");
        auto config = accel::config::parse_scheduler_config(config_json);
        auto s = std::make_shared<accel::AcceleratedScheduler>(o.impl, std::move(config));
        emit(out, std::move(s));
    });
}

ACCEL_API void accel_scheduler_free(accel_scheduler_t *scheduler) noexcept { delete scheduler; }

ACCEL_API accel_status_t accel_scheduler_step(accel_scheduler_t *scheduler) noexcept
{
    return guarded([&] { checked(scheduler, "scheduler").impl->step(); });
}

ACCEL_API accel_status_t accel_scheduler_get_last_lr(const accel_scheduler_t *scheduler, double *out) noexcept
{
    return guarded([&] {
        auto &s = checked(scheduler, "scheduler");
        out_param(out);
        *out = s.impl->last_lr();
    });
}

ACCEL_API accel_status_t accel_scheduler_get_step_count(const accel_scheduler_t *scheduler, int64_t *out) noexcept
{
    return guarded([&] {
        auto &s = checked(scheduler, "scheduler");
        out_param(out);
        *out = s.impl->step_count();
    });
}

} // extern "C"
