// What a call threw, for tests that check a failure's status and message (EXPECT_*_ERROR macros of several
// test files): the accel::Error, or a test failure and an ACCEL_OK error when nothing was thrown.
#pragma once

#include "common/error.hpp"

#include <functional>

#include <gtest/gtest.h>

inline accel::Error catch_error(const std::function<void()> &f)
{
    try {
        f();
    } catch (const accel::Error &e) {
        return e;
    }
    ADD_FAILURE() << "expected an accel::Error";
    return accel::Error(ACCEL_OK, "");
}
