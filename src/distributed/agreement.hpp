// Agreement on a local verdict: each process has done its part of an operation that must succeed on all of
// them or on none (load_state reads and checks everything before anything is applied); one collective tells
// every process whether all succeeded, and when one did not, every process fails with the same status and the
// first failing process's message, naming that process. Without it, one process could apply a checkpoint its
// peer refused, or wait in the next collective for a peer that has already returned.
#pragma once

#include "common/error.hpp"

#include <exception>
#include <string>

namespace accel::distributed {

class Communicator;

// What every process throws when a process's part failed: the first failing process's status and message.
class Rejected : public Error {
public:
    Rejected(accel_status_t code, const std::string &message, int32_t rank) : Error(code, message), rank_(rank) {}
    int32_t rank() const { return rank_; }

private:
    int32_t rank_;
};

// Collective (every process calls it with its own outcome: null when its part succeeded). Returns when every
// part succeeded; otherwise throws Rejected on every process. `comm` null or of size 1: throws the local
// failure as Rejected. Failures of the collective itself propagate as they are.
void agree(Communicator *comm, std::exception_ptr local);

} // namespace accel::distributed
