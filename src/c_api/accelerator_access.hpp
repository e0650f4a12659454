// Access to the accelerator behind a C handle, shared by the two halves of accel/accelerator.h
// (c_api/accelerator.cpp and c_api/accelerator_distributed.cpp).
#pragma once

#include "c_api/guard.hpp"
#include "c_api/handles.hpp"

namespace accel::capi {

inline accel::Accelerator &acc_of(accel_accelerator_t *a) { return *checked(a, "accelerator").impl; }
inline const accel::Accelerator &acc_of(const accel_accelerator_t *a) { return *checked(a, "accelerator").impl; }

// The shape of every read-only query (get_/is_/has_): check the handle, clear the out-pointer, store
// what `get` reads from the accelerator.
template <class T, class Get>
accel_status_t query(const accel_accelerator_t *accelerator, T *out, Get &&get) noexcept
{
    return guarded([&] {
        const accel::Accelerator &a = acc_of(accelerator);
        out_param(out);
        *out = get(a);
    });
}

} // namespace accel::capi
