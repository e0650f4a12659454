// Shared by the libFuzzer targets (tests/fuzz/fuzz_*.cpp). What a target checks, beyond "no crash, no
// sanitizer report, no hang" (libFuzzer's own): an input is either accepted or rejected with an accel::Error
// (or a status) that is not INTERNAL/UNKNOWN and whose message names something and carries no backtrace.
// Anything else (another exception escaping, a LibTorch error turned into INTERNAL) aborts: a finding.
#pragma once

#include "common/error.hpp"

#include <accel/status.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace accel::fuzz {

[[noreturn]] inline void finding(const std::string &what)
{
    std::fprintf(stderr, "accel fuzz finding: %s\n", what.c_str());
    std::abort();
}

// The current input: a message may quote it, so a backtrace marker the input itself holds is no finding.
inline std::string &current_input()
{
    static std::string input;
    return input;
}

inline void check_message(accel_status_t status, const std::string &msg)
{
    if (status == ACCEL_ERR_INTERNAL || status == ACCEL_ERR_UNKNOWN)
        finding(std::string(accel_status_name(status)) + ": " + msg);
    if (msg.empty()) finding(std::string(accel_status_name(status)) + " with an empty message");
    for (const char *marker : {"frame #", "Exception raised from"})
        if (msg.find(marker) != std::string::npos && current_input().find(marker) == std::string::npos)
            finding("a backtrace in the message: " + msg);
}

// Runs body(); an accel::Error is an accepted rejection when check_message() passes.
template <class Body>
bool accepts(Body &&body)
{
    try {
        body();
        return true;
    } catch (const accel::Error &e) {
        check_message(e.code(), e.what());
        return false;
    }
}

// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
inline bool valid_utf8(const std::string &s)
{
    for (size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 && b >= 0xC2 ? 2 : (b >> 4) == 0xE ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
        const auto c1 = n > 1 ? static_cast<unsigned char>(s[i + 1]) : 0;
        if ((b == 0xE0 && c1 < 0xA0) || (b == 0xED && c1 > 0x9F) || (b == 0xF0 && c1 < 0x90) || (b == 0xF4 && c1 > 0x8F))
            return false;
        i += n;
    }
    return true;
}

// A C call's status: OK, or a rejection checked as above; a message that crossed the C API is valid UTF-8 (the
// bindings decode it as such).
inline bool status_ok(accel_status_t status)
{
    if (status == ACCEL_OK) return true;
    const std::string msg = accel_last_error_message();
    if (!valid_utf8(msg)) finding("a message that is not valid UTF-8: " + msg);
    check_message(status, msg);
    return false;
}

// The input as a NUL-terminated string (the JSON entry points take C strings); embedded NULs stay and
// simply end the text early, as they would for a C caller.
inline std::string text_of(const uint8_t *data, size_t size)
{
    current_input().assign(reinterpret_cast<const char *>(data), size);
    return current_input();
}

} // namespace accel::fuzz
