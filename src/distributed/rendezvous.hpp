// Rendezvous: where the processes of one job meet (env:// or tcp:// TCPStore hosted by rank 0, or a
// file:// FileStore), shared by the gloo and nccl backends. The store carries gloo's connection
// details, NCCL's ncclUniqueId and the heartbeats that name a rank that stopped. With a token
// (ACCEL_RDZV_TOKEN / ACCEL_RDZV_TOKEN_FILE) the store is accel's own, which serves only the processes that
// prove it (auth_store.hpp); without one, LibTorch's TCPStore, open to anyone who reaches the port.
#pragma once

#include "config/accelerator_config.hpp"
#include "distributed/communicator.hpp"

#include <accel/status.h>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

namespace accel::distributed {

struct Rendezvous {
    enum Kind { Tcp, File } kind = Tcp;
    std::string host;
    int port = 29500;
    std::string path;
    std::string describe() const { return kind == File ? "file://" + path : host + ":" + std::to_string(port); }
};

// The rendezvous kwargs_handlers.init_process_group.init_method (or MASTER_ADDR/MASTER_PORT) describes.
Rendezvous rendezvous_of(const config::AcceleratorConfig &c);

// A TCPStore connection (the authenticated store's when the job has a token); `server` hosts it, waiting for `workers` processes when given. A client's every read
// and write of the store gives up after `timeout` ("Socket Timeout"), also when the host stopped without closing
// the connection; *sockets (when given) are its sockets.
c10::intrusive_ptr<c10d::Store> connect_tcp(const Rendezvous &r, bool server, c10::optional<size_t> workers,
                                            std::chrono::milliseconds timeout, std::vector<int> *sockets = nullptr);

// The store of this job (rank 0 hosts a TCPStore), waiting until every process joined. Failures are
// UNAVAILABLE or DEADLINE_EXCEEDED naming `backend`, the rendezvous address and this rank.
c10::intrusive_ptr<c10d::Store> open_store(const Rendezvous &r, const config::AcceleratorConfig &c, const char *backend);

// A c10d exception's message without the C++ stack trace LibTorch appends.
std::string first_line(const std::string &s);

// The status of a failed store operation: DEADLINE_EXCEEDED when its message says it timed out, else
// UNAVAILABLE (the store's host went away).
accel_status_t store_failure_status(const std::string &message);

} // namespace accel::distributed
