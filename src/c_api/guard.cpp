#include "c_api/guard.hpp"

#include "common/out_of_memory.hpp"
#include "distributed/out_of_memory_notice.hpp"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace accel::capi {

namespace {
thread_local std::string last_error;

// A LibTorch error's what() carries a C++ backtrace ("Exception raised from ...", "frame #0: ..."); a user needs
// its first line. what_without_backtrace() drops most of it, but allocator errors put frames in the message
// itself, so the first line is kept whatever follows.
std::string first_line(const c10::Error &e)
{
    const std::string s(e.what_without_backtrace());
    const size_t begin = s.find_first_not_of('\n');
    if (begin == std::string::npos)
        return "";
    return s.substr(begin, s.find('\n', begin) - begin); // npos - begin: to the end
}
} // namespace

namespace {

// The length of the well-formed UTF-8 sequence at s[i] (0 when there is none): the bindings decode messages
// as UTF-8, and a byte from a damaged file quoted into a message must not make them fail.
size_t utf8_sequence(const std::string &s, size_t i)
{
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 && b >= 0xC2 ? 2 : (b >> 4) == 0xE ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return 0;
    const auto c1 = static_cast<unsigned char>(s[i + 1 < s.size() ? i + 1 : i]);
    if ((b == 0xE0 && c1 < 0xA0) || (b == 0xED && c1 > 0x9F) || (b == 0xF0 && c1 < 0x90) || (b == 0xF4 && c1 > 0x8F))
        return 0; // overlong, surrogate or above U+10FFFF
    return n;
}

// `message` with every byte that is not part of well-formed UTF-8 written as \x{NN}: the braces keep an escape
// from running into the text around it (a bare "\xff" before "rame #" would read "...frame #...").
std::string valid_utf8(const std::string &message)
{
    std::string out;
    out.reserve(message.size());
    for (size_t i = 0; i < message.size();) {
        if (const size_t n = utf8_sequence(message, i)) {
            out.append(message, i, n);
            i += n;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            const auto b = static_cast<unsigned char>(message[i++]);
            out += "\\x{";
            out += hex[b >> 4];
            out += hex[b & 0xF];
            out += '}';
        }
    }
    return out;
}

} // namespace

void set_last_error(const std::string &message) noexcept
{
    try {
        last_error = valid_utf8(message);
    } catch (...) {
        last_error.clear();
    }
}

namespace detail {

void clear_last_error() noexcept { last_error.clear(); }

namespace {
// An allocation failure: RESOURCE_EXHAUSTED, and this process's peers (if any) learn that it ran out of memory,
// so that one waiting for it in a collective says so instead of "may be stuck".
accel_status_t out_of_memory(const std::string &message)
{
    set_last_error(message);
    distributed::notice_out_of_memory(last_error);
    return ACCEL_ERR_RESOURCE_EXHAUSTED;
}
} // namespace

accel_status_t status_from_current_exception() noexcept
{
    try {
        throw;
    } catch (const Error &e) {
        set_last_error(e.what());
        if (e.code() == ACCEL_ERR_RESOURCE_EXHAUSTED && is_out_of_memory(e.what()))
            distributed::notice_out_of_memory(last_error);
        return e.code();
    } catch (const c10::NotImplementedError &e) {
        set_last_error(first_line(e));
        return ACCEL_ERR_UNIMPLEMENTED;
    } catch (const c10::IndexError &e) {
        set_last_error(first_line(e));
        return ACCEL_ERR_OUT_OF_RANGE;
    } catch (const c10::ValueError &e) {
        set_last_error(first_line(e));
        return ACCEL_ERR_INVALID_ARGUMENT;
    } catch (const c10::TypeError &e) {
        set_last_error(first_line(e));
        return ACCEL_ERR_INVALID_ARGUMENT;
    } catch (const c10::Error &e) {
        std::string msg = first_line(e);
        // LibTorch signals allocation failure as a plain c10::Error (c10::OutOfMemoryError for CUDA's allocator).
        if (dynamic_cast<const c10::OutOfMemoryError *>(&e) != nullptr || is_out_of_memory(msg))
            return out_of_memory(out_of_memory_message(msg));
        set_last_error("LibTorch error: " + msg);
        return ACCEL_ERR_INTERNAL;
    } catch (const std::bad_alloc &) {
        return out_of_memory("out of memory: an allocation failed (std::bad_alloc)");
    } catch (const std::exception &e) {
        set_last_error(e.what());
        return ACCEL_ERR_UNKNOWN;
    } catch (...) {
        set_last_error("unknown exception");
        return ACCEL_ERR_UNKNOWN;
    }
}

} // namespace detail

char *owned_string(const std::string &s)
{
    char *p = static_cast<char *>(std::malloc(s.size() + 1));
    if (p == nullptr)
        throw std::bad_alloc();
    std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}

} // namespace accel::capi

extern "C" {

ACCEL_API const char *accel_last_error_message(void) noexcept { return accel::capi::last_error.c_str(); }

ACCEL_API void accel_string_free(char *str) noexcept { std::free(str); }

ACCEL_API const char *accel_status_name(accel_status_t status) noexcept
{
    switch (status) {
    case ACCEL_OK: return "ACCEL_OK";
    case ACCEL_ERR_CANCELLED: return "ACCEL_ERR_CANCELLED";
    case ACCEL_ERR_UNKNOWN: return "ACCEL_ERR_UNKNOWN";
    case ACCEL_ERR_INVALID_ARGUMENT: return "ACCEL_ERR_INVALID_ARGUMENT";
    case ACCEL_ERR_DEADLINE_EXCEEDED: return "ACCEL_ERR_DEADLINE_EXCEEDED";
    case ACCEL_ERR_NOT_FOUND: return "ACCEL_ERR_NOT_FOUND";
    case ACCEL_ERR_ALREADY_EXISTS: return "ACCEL_ERR_ALREADY_EXISTS";
    case ACCEL_ERR_PERMISSION_DENIED: return "ACCEL_ERR_PERMISSION_DENIED";
    case ACCEL_ERR_RESOURCE_EXHAUSTED: return "ACCEL_ERR_RESOURCE_EXHAUSTED";
    case ACCEL_ERR_FAILED_PRECONDITION: return "ACCEL_ERR_FAILED_PRECONDITION";
    case ACCEL_ERR_ABORTED: return "ACCEL_ERR_ABORTED";
    case ACCEL_ERR_OUT_OF_RANGE: return "ACCEL_ERR_OUT_OF_RANGE";
    case ACCEL_ERR_UNIMPLEMENTED: return "ACCEL_ERR_UNIMPLEMENTED";
    case ACCEL_ERR_INTERNAL: return "ACCEL_ERR_INTERNAL";
    case ACCEL_ERR_UNAVAILABLE: return "ACCEL_ERR_UNAVAILABLE";
    case ACCEL_ERR_DATA_LOSS: return "ACCEL_ERR_DATA_LOSS";
    default: return "ACCEL_ERR_UNRECOGNIZED";
    }
}

} // extern "C"
