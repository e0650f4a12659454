// The rendezvous store of a job with a token (issue 40.4): a c10d::Store whose every connection proved the
// job's token to rank 0's StoreServer (store_server.hpp) and checked the server's proof in return, so that
// c10d's process groups (gloo, nccl) and accel's heartbeats use it exactly as they use LibTorch's TCPStore.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace accel::distributed {

struct Rendezvous;

// A connection to the authenticated store at r.host:r.port; `server` also hosts it there (the server lives as
// long as the returned store). With `workers`, the call returns once that many processes have connected with it
// (rank 0 waits for them; everyone counts itself), as TCPStore's waitWorkers does. Every operation gives up
// after `timeout` (the store's timeout; "timed out" in the message). Failures: accel::Error PERMISSION_DENIED
// when the token was refused or the host could not prove it, std::runtime_error otherwise (a timeout, or the
// host went away), as TCPStore's are. *sockets (when given) is the connection's socket.
c10::intrusive_ptr<c10d::Store> connect_authenticated(const Rendezvous &r, const std::string &token, bool server,
                                                      c10::optional<size_t> workers, std::chrono::milliseconds timeout,
                                                      std::vector<int> *sockets);

} // namespace accel::distributed
