#include "distributed/rendezvous.hpp"

#include "common/error.hpp"
#include "config/env.hpp"
#include "distributed/auth_store.hpp"
#include "distributed/rdzv_wire.hpp"

#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <vector>

namespace accel::distributed {

namespace {

// Descriptors of this process whose link names start with `kind` ("pipe:", "socket:"): fd -> "pipe:[inode]".
std::map<int, std::string> fds_of(const char *kind)
{
    std::map<int, std::string> out;
    DIR *d = opendir("/proc/self/fd");
    if (d == nullptr) return out;
    const int own = dirfd(d);
    while (dirent *e = readdir(d)) {
        char *end = nullptr;
        const long fd = std::strtol(e->d_name, &end, 10);
        if (end == e->d_name || *end != '\0' || fd == own) continue;
        char target[64];
        const std::string link = std::string("/proc/self/fd/") + e->d_name;
        const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (std::string(target).rfind(kind, 0) == 0) out[static_cast<int>(fd)] = target;
    }
    closedir(d);
    return out;
}

// LibTorch 1.13's TCPStore client starts a thread (TCPStoreWorkerDaemon) that serves watchKey callbacks,
// which accel never uses. When the host of the store (rank 0) dies and the kernel resets that thread's
// connection, it throws out of its thread function and std::terminate aborts the whole process (and
// when the host closes it cleanly, the thread spins on it). So right after construction the thread is
// stopped the way its owner stops it: the write end of its control pipe is closed (replaced by
// /dev/null, so the descriptor number stays valid for the owner's own close later). The pipe is found
// as the one pipe the constructor created; if that is ambiguous nothing is touched.
void stop_callback_thread(const std::map<int, std::string> &before)
{
    std::map<std::string, std::vector<int>> created;
    for (const auto &[fd, inode] : fds_of("pipe:"))
        if (before.count(fd) == 0 || before.at(fd) != inode) created[inode].push_back(fd);
    if (created.size() != 1 || created.begin()->second.size() != 2) return;
    for (int fd : created.begin()->second) {
        const int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || (flags & O_ACCMODE) != O_WRONLY) continue;
        const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        if (null_fd < 0) return;
        dup2(null_fd, fd);
        close(null_fd);
    }
}

// LibTorch 1.13's TCPStore client reads its answers with a blocking recv() whose only deadline is the one a
// wait() or get() sets on the socket (SO_RCVTIMEO, the store's timeout); until the first of them, and for
// check(), add() and set() at any time, a host that stopped (SIGSTOP, a debugger, a hung machine) but whose kernel
// keeps the connection open leaves the caller in recv() forever. So the sockets the constructor created (the
// client's and its callback client's) get a receive and a send deadline of their own right after construction;
// c10d turns an expiry into "Socket Timeout". Returns those sockets.
std::vector<int> bound_socket_waits(const std::map<int, std::string> &before, std::chrono::milliseconds timeout)
{
    std::vector<int> created;
    for (const auto &[fd, inode] : fds_of("socket:"))
        if (before.count(fd) == 0 || before.at(fd) != inode) created.push_back(fd);
    const auto ms = std::max<int64_t>(1, timeout.count());
    timeval tv{};
    tv.tv_sec = static_cast<time_t>(ms / 1000);
    tv.tv_usec = static_cast<suseconds_t>((ms % 1000) * 1000);
    for (int fd : created) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    return created;
}

// LibTorch logs through glog (Debian's 1.13) or c10's own logger (pip's builds), and c10d's socket code logs
// WARNING and ERROR lines for failures that accel reports in its status message anyway: a busy port printed
// three glog lines and "Logging before InitGoogleLogging()" before accel's own message. No C++ program calls
// c10::initLogging, so LibTorch's TORCH_CPP_LOG_LEVEL variable is otherwise ignored; accel applies it here
// and, without it (or glog's own GLOG_minloglevel), keeps only FATAL lines. The levels are found with dlsym
// because libaccel does not link glog itself (libc10 loads it); a LibTorch with neither symbol is left alone.
void set_torch_log_level()
{
    static std::once_flag once;
    std::call_once(once, [] {
        const std::optional<int> asked = config::torch_log_level_from_env();
        if (!asked && config::glog_level_in_env()) return;
        const int level = asked.value_or(3); // glog's FATAL
        for (const char *flag : {"_ZN3fLI17FLAGS_minloglevelE",        // glog: fLI::FLAGS_minloglevel
                                 "_ZN3c1023FLAGS_caffe2_log_levelE"}) // c10 without glog: c10::FLAGS_caffe2_log_level
            if (auto *v = static_cast<int *>(dlsym(RTLD_DEFAULT, flag))) *v = level;
    });
}

// The hint for a failed rendezvous: a busy port names the port and how to choose another; anything else
// (a peer that never came, a wrong address) is a timeout, with the question launchers' users need.
std::string rendezvous_hint(const Rendezvous &r, const config::AcceleratorConfig &c, const std::string &why)
{
    const auto &t = c.topology;
    if (why.find("Address already in use") != std::string::npos || why.find("errno: 98") != std::string::npos) {
        const std::string where = c.init_process_group.init_method.rfind("tcp://", 0) == 0
                                      ? "the port of kwargs_handlers.init_process_group.init_method"
                                      : "accel launch --main_process_port 0 (a free port) or another number; "
                                        "MASTER_PORT under other launchers";
        return "port " + std::to_string(r.port) + " is already in use on this machine (another job or program "
               "listens on it), so rank 0 cannot host the rendezvous store there; pick another port: " + where;
    }
    return "timeout " + std::to_string(c.init_process_group.timeout) + " s; are all " + std::to_string(t.world_size) +
           " processes started, with the same MASTER_ADDR and MASTER_PORT?";
}

} // namespace

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
                                            std::chrono::milliseconds timeout, std::vector<int> *sockets)
{
    if (sockets != nullptr) sockets->clear();
    // With a token, accel's own store, which serves only processes that prove it (auth_store.hpp).
    if (const auto token = rdzv::token_from_env()) return connect_authenticated(r, *token, server, workers, timeout, sockets);
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(r.port);
    o.isServer = server;
    o.numWorkers = workers;
    o.waitWorkers = workers.has_value();
    o.timeout = timeout;
    if (server) return c10::make_intrusive<c10d::TCPStore>(r.host, o); // its own host: no peer to lose
    // One client construction at a time, so that the pipe it creates is the only new one of ours.
    static std::mutex m;
    std::lock_guard<std::mutex> lock(m);
    const auto before = fds_of("pipe:");
    const auto sockets_before = fds_of("socket:");
    auto store = c10::make_intrusive<c10d::TCPStore>(r.host, o);
    stop_callback_thread(before);
    auto fds = bound_socket_waits(sockets_before, timeout);
    if (sockets != nullptr) *sockets = std::move(fds);
    return store;
}

accel_status_t store_failure_status(const std::string &message)
{
    std::string lower = message;
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
    // "Timed out", "timeout", and c10d's "Socket Timeout" when a bounded read of the store expired
    const bool timed_out = lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
    return timed_out ? ACCEL_ERR_DEADLINE_EXCEEDED : ACCEL_ERR_UNAVAILABLE;
}

c10::intrusive_ptr<c10d::Store> open_store(const Rendezvous &r, const config::AcceleratorConfig &c, const char *backend)
{
    const auto &t = c.topology;
    const auto timeout = init_timeout(c);
    set_torch_log_level();
    try {
        if (r.kind == Rendezvous::File) {
            c10::intrusive_ptr<c10d::Store> store = c10::make_intrusive<c10d::FileStore>(r.path, t.world_size);
            store->setTimeout(timeout);
            return store;
        }
        if (t.agent_store) { // torchrun's agent hosts the store: no rank may bind its port
            if (rdzv::token_from_env())
                fail(ACCEL_ERR_FAILED_PRECONDITION,
                     "ACCEL_RDZV_TOKEN (or ACCEL_RDZV_TOKEN_FILE) is set, but torchrun's agent hosts this job's rendezvous "
                     "store (TORCHELASTIC_USE_AGENT_STORE), and LibTorch's store cannot check a token; unset it, or start "
                     "the job with accel launch");
            return c10::make_intrusive<c10d::PrefixStore>("/worker/attempt_" + t.restart_count,
                                                          connect_tcp(r, false, c10::nullopt, timeout));
        }
        return connect_tcp(r, t.rank == 0, static_cast<size_t>(t.world_size), timeout);
    } catch (const Error &e) { // a refused token, a bad token file: the message says what to do
        fail(e.code(), std::string(backend) + " rendezvous at " + r.describe() + " failed on rank " + std::to_string(t.rank) +
                           " of " + std::to_string(t.world_size) + ": " + e.what());
    } catch (const std::exception &e) {
        const std::string msg = first_line(e.what());
        fail(store_failure_status(msg), std::string(backend) + " rendezvous at " + r.describe() + " failed on rank " +
                                            std::to_string(t.rank) + " of " + std::to_string(t.world_size) + " (" +
                                            rendezvous_hint(r, c, msg) + "): " + msg);
    }
}

} // namespace accel::distributed
