// accel::Error: the one exception type src/ throws for expected failures; src/c_api/ turns it into a status.
#pragma once

#include <accel/status.h>

#include <stdexcept>
#include <string>

namespace accel {

class Error : public std::runtime_error {
public:
    Error(accel_status_t code, const std::string &message) : std::runtime_error(message), code_(code) {}
    accel_status_t code() const noexcept { return code_; }

private:
    accel_status_t code_;
};

[[noreturn]] inline void fail(accel_status_t code, const std::string &message) { throw Error(code, message); }

inline void require(bool condition, accel_status_t code, const std::string &message)
{
    if (!condition)
        fail(code, message);
}

} // namespace accel
