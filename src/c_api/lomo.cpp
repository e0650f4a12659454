// accel_accelerator_lomo_backward (include/accel/accelerator.h).
#include <accel/accelerator.h>

#include "accelerator/accelerator.hpp"
#include "c_api/accelerator_access.hpp"
#include "c_api/guard.hpp"
#include "c_api/handles.hpp"

using namespace accel::capi;

extern "C" ACCEL_API accel_status_t accel_accelerator_lomo_backward(accel_accelerator_t *accelerator, accel_tensor_t *loss,
                                                                    double learning_rate) noexcept
{
    return guarded([&] { acc_of(accelerator).lomo_backward(checked(loss, "loss").tensor, learning_rate); });
}
