// The C++ wrapper's tests: EXPECT(cond) prints the file, line and condition and exits 1 when cond is false
// (the tests are plain programs run by ctest, without a test framework).
#pragma once

#include <cstdio>
#include <cstdlib>

#define EXPECT(cond)                                                                                   \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            std::fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond);       \
            std::exit(1);                                                                              \
        }                                                                                              \
    } while (0)
