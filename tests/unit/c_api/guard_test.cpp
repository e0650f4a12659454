// c_api/guard: LibTorch errors become statuses whose messages are the error's first line, never its backtrace.
#include "c_api/guard.hpp"

#include <c10/util/Exception.h>
#include <c10/util/Logging.h> // CAFFE_ENFORCE_EQ
#include <gtest/gtest.h>

#include <string>

namespace {

std::string message_of(accel_status_t (*call)(), accel_status_t expected)
{
    EXPECT_EQ(call(), expected);
    return accel_last_error_message();
}

void expect_no_backtrace(const std::string &msg)
{
    EXPECT_EQ(msg.find("frame #"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("Exception raised from"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

} // namespace

// CAFFE_ENFORCE is how LibTorch's CPU allocator reports a failed allocation: its what() ends with "frame #0: ...".
TEST(Guard, AllocatorErrorIsResourceExhaustedWithoutBacktrace)
{
    std::string msg = message_of(
        [] {
            return accel::capi::guarded([] {
                CAFFE_ENFORCE_EQ(12, 0, "DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes.");
            });
        },
        ACCEL_ERR_RESOURCE_EXHAUSTED);
    EXPECT_NE(msg.find("can't allocate memory: you tried to allocate 1 bytes"), std::string::npos) << msg;
    expect_no_backtrace(msg);
}

TEST(Guard, TorchCheckKeepsFirstLine)
{
    std::string msg = message_of(
        [] { return accel::capi::guarded([] { TORCH_CHECK(false, "first line\nsecond line"); }); },
        ACCEL_ERR_INTERNAL);
    EXPECT_EQ(msg, "LibTorch error: first line");
    msg = message_of([] { return accel::capi::guarded([] { TORCH_CHECK_INDEX(false, "index 7 out of range"); }); },
                     ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_EQ(msg, "index 7 out of range");
    msg = message_of([] { return accel::capi::guarded([] { TORCH_CHECK_VALUE(false, "\n\nafter blank lines"); }); },
                     ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(msg, "after blank lines");
    expect_no_backtrace(msg);
}

// Messages are always valid UTF-8 (issue 42.5): a byte quoted from a damaged file is written as \x{NN} (the braces
// keep an escape from running into the text around it: "\xff" before "rame #" read as a backtrace's "frame #");
// well-formed multi-byte characters stay.
TEST(Guard, MessagesAreValidUtf8)
{
    std::string msg = message_of(
        [] {
            return accel::capi::guarded([] {
                accel::fail(ACCEL_ERR_DATA_LOSS, std::string("metadata.json: bad byte \xff here, caf\xc3\xa9, cut \xe2\x82"));
            });
        },
        ACCEL_ERR_DATA_LOSS);
    EXPECT_EQ(msg, "metadata.json: bad byte \\x{FF} here, caf\xc3\xa9, cut \\x{E2}\\x{82}");
    msg = message_of([] { return accel::capi::guarded([] { accel::fail(ACCEL_ERR_DATA_LOSS, "\xc0\xaf \xed\xa0\x80"); }); },
                     ACCEL_ERR_DATA_LOSS);
    EXPECT_EQ(msg, "\\x{C0}\\x{AF} \\x{ED}\\x{A0}\\x{80}"); // overlong '/', a surrogate
    // Escapes never join the text around them into a backtrace marker.
    msg = message_of([] { return accel::capi::guarded([] { accel::fail(ACCEL_ERR_DATA_LOSS, "\xfframe # \xbexception raised from"); }); },
                     ACCEL_ERR_DATA_LOSS);
    EXPECT_EQ(msg.find("frame #"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("Exception raised from"), std::string::npos) << msg;
}
