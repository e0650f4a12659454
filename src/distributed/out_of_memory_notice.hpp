// Tells this process's peers that it ran out of memory (issue 42.4), without LibTorch in the includer (the C API's
// error mapping). Over gloo the note travels on the heartbeat: a peer whose collective then fails (its timeout, or
// this process gone) names this rank's out-of-memory as the cause. The note alone ends no peer's wait: a program may
// catch the failure and go on with a smaller batch. No-op in a single process and on the mpi and nccl backends.
#pragma once

#include <string>

namespace accel::distributed {

void notice_out_of_memory(const std::string &message) noexcept;

} // namespace accel::distributed
