// Out of memory (issue 42.4): the allocators' failures are recognised by their own text and become
// ACCEL_ERR_RESOURCE_EXHAUSTED saying "out of memory" with the size; other failures are not taken for them.
#include "c_api/guard.hpp"
#include "common/out_of_memory.hpp"

#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <new>
#include <string>

TEST(OutOfMemory, RecognisesTheAllocatorsText)
{
    EXPECT_TRUE(accel::is_out_of_memory("[enforce fail at alloc_cpu.cpp:75] err == 0. DefaultCPUAllocator: can't "
                                        "allocate memory: you tried to allocate 4294967296 bytes. Error code 12"));
    EXPECT_TRUE(accel::is_out_of_memory("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)"));
    EXPECT_TRUE(accel::is_out_of_memory("std::bad_alloc"));
    EXPECT_FALSE(accel::is_out_of_memory("No space left on device"));                  // a full disk is not memory
    EXPECT_FALSE(accel::is_out_of_memory("mat1 and mat2 shapes cannot be multiplied")); // a shape error
}

TEST(OutOfMemory, MessageNamesTheSize)
{
    EXPECT_EQ(accel::out_of_memory_message("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4294967296 "
                                           "bytes. Error code 12 (Cannot allocate memory)\nframe #0: x"),
              "out of memory (an allocation of 4294967296 bytes failed): DefaultCPUAllocator: can't allocate memory: you "
              "tried to allocate 4294967296 bytes. Error code 12 (Cannot allocate memory)");
    EXPECT_EQ(accel::out_of_memory_message("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)"),
              "out of memory (an allocation of 2.00 GiB failed): CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0)");
    EXPECT_EQ(accel::out_of_memory_message("std::bad_alloc"), "out of memory: std::bad_alloc");
}

TEST(OutOfMemory, ForwardContextIsResourceExhausted)
{
    try {
        accel::fail_if_out_of_memory("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes.",
                                     "input: running the model on a tensor of shape [2, 3]");
        FAIL() << "no exception";
    } catch (const accel::Error &e) {
        EXPECT_EQ(e.code(), ACCEL_ERR_RESOURCE_EXHAUSTED);
        EXPECT_EQ(std::string(e.what()).rfind("input: running the model on a tensor of shape [2, 3]: out of memory "
                                              "(an allocation of 8 bytes failed)", 0),
                  0u)
            << e.what();
    }
    EXPECT_NO_THROW(accel::fail_if_out_of_memory("shape mismatch", "input"));
}

TEST(OutOfMemory, GuardMapsEveryKind)
{
    EXPECT_EQ(accel::capi::guarded([] { throw std::bad_alloc(); }), ACCEL_ERR_RESOURCE_EXHAUSTED);
    EXPECT_NE(std::string(accel_last_error_message()).find("out of memory"), std::string::npos);
    EXPECT_EQ(accel::capi::guarded([] {
                  throw c10::OutOfMemoryError({"f", "file.cpp", 1}, "CUDA out of memory. Tried to allocate 20.00 MiB");
              }),
              ACCEL_ERR_RESOURCE_EXHAUSTED);
    EXPECT_NE(std::string(accel_last_error_message()).find("an allocation of 20.00 MiB failed"), std::string::npos)
        << accel_last_error_message();
    EXPECT_EQ(accel::capi::guarded([] { throw c10::Error({"f", "file.cpp", 1}, "something else"); }), ACCEL_ERR_INTERNAL);
}
