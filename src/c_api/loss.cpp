#include <accel/loss.h>

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"
#include "ops/loss.hpp"

using namespace accel::capi;

extern "C" ACCEL_API accel_status_t accel_loss_compute(const char *name, const accel_tensor_t *outputs,
                                                       const accel_tensor_t *targets, accel_tensor_t **out) noexcept
{
    return guarded([&] {
        out_param(out);
        accel::Loss kind = accel::parse_loss(name);
        auto &o = checked(outputs, "outputs");
        auto &t = checked(targets, "targets");
        *out = new_tensor(accel::compute_loss(kind, o.tensor, t.tensor));
    });
}
