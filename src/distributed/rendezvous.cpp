#include "distributed/rendezvous.hpp"

#include "common/error.hpp"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>

namespace accel::distributed {

std::string first_line(const std::string &s)
{
    auto pos = s.find("\nException raised from");
    return pos == std::string::npos ? s : s.substr(0, pos);
}

Rendezvous rendezvous_of(const config::AcceleratorConfig &c)
{
    Rendezvous r;
    r.host = c.topology.master_addr;
    r.port = c.topology.master_port;
    const std::string &m = c.init_process_group.init_method;
    if (m.rfind("tcp://", 0) == 0) {
        std::string rest = m.substr(6);
        auto colon = rest.rfind(':');
        if (colon == std::string::npos)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.init_method: expected "
                                             "\"tcp://HOST:PORT\", got \"" + m + "\"");
        r.host = rest.substr(0, colon);
        char *end = nullptr;
        long p = std::strtol(rest.c_str() + colon + 1, &end, 10);
        if (*end != '\0' || p < 1 || p > 65535)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.init_method: bad port in \"" + m + "\"");
        r.port = static_cast<int>(p);
    } else if (m.rfind("file://", 0) == 0) {
        r.kind = Rendezvous::File;
        r.path = m.substr(7);
        if (r.path.empty())
            fail(ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.init_method: empty path in \"" + m + "\"");
    }
    // Otherwise env:// (MASTER_ADDR/MASTER_PORT). mpirun/srun set no MASTER_ADDR: a single machine is assumed.
    return r;
}

c10::intrusive_ptr<c10d::Store> connect_tcp(const Rendezvous &r, bool server, c10::optional<size_t> workers,
                                            std::chrono::milliseconds timeout)
{
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(r.port);
    o.isServer = server;
    o.numWorkers = workers;
    o.waitWorkers = workers.has_value();
    o.timeout = timeout;
    return c10::make_intrusive<c10d::TCPStore>(r.host, o);
}

accel_status_t store_failure_status(const std::string &message)
{
    const bool timed_out = message.find("imed out") != std::string::npos || message.find("timeout") != std::string::npos;
    return timed_out ? ACCEL_ERR_DEADLINE_EXCEEDED : ACCEL_ERR_UNAVAILABLE;
}

c10::intrusive_ptr<c10d::Store> open_store(const Rendezvous &r, const config::AcceleratorConfig &c, const char *backend)
{
    const auto &t = c.topology;
    const auto timeout = init_timeout(c);
    try {
        if (r.kind == Rendezvous::File) {
            c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(r.path, t.world_size);
            store->setTimeout(timeout);
            return store;
        }
        return connect_tcp(r, t.rank == 0, static_cast<size_t>(t.world_size), timeout);
    } catch (const std::exception &e) {
        const std::string msg = first_line(e.what());
        fail(store_failure_status(msg),
             std::string(backend) + " rendezvous at " + r.describe() + " failed on rank " + std::to_string(t.rank) +
                 " of " + std::to_string(t.world_size) + " (timeout " + std::to_string(c.init_process_group.timeout) +
                 " s; are all " + std::to_string(t.world_size) + " processes started, with the same MASTER_ADDR and "
                 "MASTER_PORT?): " + msg);
    }
}

} // namespace accel::distributed
