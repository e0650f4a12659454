// An empty folder of the running test's own (suite, `name`, process id), for tests that write files: removed
// first if a previous run left it, so every run starts from nothing.
#pragma once

#include "common/files.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <string>

inline std::string fresh_dir(const std::string &name)
{
    const std::string suite = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    const std::string dir = ::testing::TempDir() + "/accel_" + suite + "_" + name + "_" + std::to_string(getpid());
    if (accel::exists(dir)) accel::remove_all(dir);
    accel::make_dirs(dir);
    return dir;
}
