// accel_accelerator_join_uneven_inputs_begin / _end (accel/accelerator.h).
#include <accel/accelerator.h>

#include "c_api/accelerator_access.hpp"
#include "c_api/handles.hpp"

#include <string>
#include <vector>

using accel::fail;
using namespace accel::capi;

extern "C" {

ACCEL_API accel_status_t accel_accelerator_join_uneven_inputs_begin(accel_accelerator_t *accelerator,
                                                                   accel_model_t *const *joinables,
                                                                   size_t num_joinables, int32_t even_batches) noexcept
{
    return guarded([&] {
        auto &a = acc_of(accelerator);
        if (joinables == nullptr && num_joinables != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "joinables: NULL with num_joinables " + std::to_string(num_joinables));
        std::vector<accel::Model *> models;
        for (size_t i = 0; i < num_joinables; ++i) {
            if (joinables[i] == nullptr)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "joinables[" + std::to_string(i) + "]: must not be NULL");
            models.push_back(joinables[i]->impl.get());
        }
        a.join_uneven_inputs_begin(models, even_batches);
    });
}

ACCEL_API accel_status_t accel_accelerator_join_uneven_inputs_end(accel_accelerator_t *accelerator) noexcept
{
    return guarded([&] { acc_of(accelerator).join_uneven_inputs_end(); });
}

} // extern "C"
