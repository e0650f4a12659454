// The single place where C++ exceptions become statuses; every extern "C" function runs through guarded().
#pragma once

#include <accel/status.h>

#include "common/error.hpp"

#include <string>

namespace accel::capi {

namespace detail {
void clear_last_error() noexcept;
accel_status_t status_from_current_exception() noexcept;
} // namespace detail

void set_last_error(const std::string &message) noexcept;

template <class Body>
accel_status_t guarded(Body &&body) noexcept
{
    detail::clear_last_error();
    try {
        body();
        return ACCEL_OK;
    } catch (...) {
        return detail::status_from_current_exception();
    }
}

// A handle argument that must not be NULL.
template <class T>
T &checked(T *handle, const char *name)
{
    if (handle == nullptr)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(name) + ": must not be NULL");
    return *handle;
}

// An out-pointer: must not be NULL; cleared first so that a failure leaves nothing to free.
template <class T>
T &out_param(T *out, const char *name = "out")
{
    if (out == nullptr)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(name) + ": must not be NULL");
    *out = T{};
    return *out;
}

inline const char *checked_string(const char *s, const char *name)
{
    if (s == nullptr)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(name) + ": must not be NULL");
    return s;
}

// A string handed out through `char **out`, freed by accel_string_free().
char *owned_string(const std::string &s);

} // namespace accel::capi
