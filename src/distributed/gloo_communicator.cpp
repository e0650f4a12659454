// gloo: LibTorch's c10d ProcessGroupGloo, rendezvous through a TCPStore (env:// or tcp://) or a
// FileStore (file://), opened by rendezvous.cpp (shared with the nccl backend).
//
// Naming the rank that died, mismatched collectives: peer_monitor.hpp's heartbeat in the store (shared with mpi).
//
// ProcessGroupGloo's header includes Gloo's own headers, which Debian's LibTorch has (libgloo-dev) and
// pip's LibTorch wheels do not ship: CMake defines ACCEL_WITH_GLOO for this file where they are found.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#ifdef ACCEL_WITH_GLOO

#include "common/out_of_memory.hpp"
#include "distributed/collective_tracker.hpp"
#include "distributed/peer_monitor.hpp"
#include "distributed/rendezvous.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <thread>

namespace accel::distributed {

namespace {

using namespace std::chrono_literals;

// "6 s", "0.5 s": a duration for messages (std::to_string would write "6.000000").
std::string seconds(std::chrono::milliseconds d)
{
    std::ostringstream os;
    os << static_cast<double>(d.count()) / 1000.0 << " s";
    return os.str();
}

// Tags of reduce_scatter's ring steps, far from those a caller of send/recv would pick.
constexpr int kReduceScatterTag = 1 << 24;
// How often a waiting collective looks for the monitor's verdict.
constexpr std::chrono::milliseconds kPollSlice{200};

// A backend failure inside a numbered collective: the diagnosis can then say where the peers are.
struct TrackedFailure : std::runtime_error {
    TrackedFailure(const std::string &what, CollectiveTracker::Ticket t) : std::runtime_error(what), ticket(t) {}
    CollectiveTracker::Ticket ticket;
};

c10d::ReduceOp to_c10d(ReduceOp op)
{
    switch (op) {
    case ReduceOp::Max: return c10d::ReduceOp::MAX;
    case ReduceOp::Min: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM; // Avg: sum, then divide (gloo has no AVG)
    }
}

// The local address a socket would use to reach `host` (so that the gloo device is reachable from
// the other machines, also inside network namespaces).
std::string local_address_towards(const std::string &host, int port)
{
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo *res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res) != 0 || res == nullptr)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "MASTER_ADDR: cannot resolve \"" + host + "\"");
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    std::string out = "127.0.0.1";
    if (fd >= 0) {
        if (connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
            sockaddr_in local{};
            socklen_t len = sizeof local;
            if (getsockname(fd, reinterpret_cast<sockaddr *>(&local), &len) == 0) {
                char buf[INET_ADDRSTRLEN];
                if (inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf)) out = buf;
            }
        }
        close(fd);
    }
    freeaddrinfo(res);
    return out;
}

// What a group's communicator shares with the world's: the monitor, the poison, the group counter.
struct Shared {
    std::unique_ptr<PeerMonitor> monitor;
    c10::intrusive_ptr<c10d::Store> store;
    std::shared_ptr<::gloo::transport::Device> device;
    std::chrono::milliseconds timeout{0};
    std::mutex m;
    std::string poison;   // first failure
    int64_t groups = 0;   // new_group calls so far (same order on every rank)
};

std::vector<std::shared_ptr<Shared>> *g_live = nullptr; // stopped at exit, before LibTorch's statics go

void stop_monitors_at_exit()
{
    if (g_live == nullptr) return;
    for (auto &s : *g_live)
        if (s->monitor) s->monitor->stop();
}

class GlooCommunicator;

class GlooWork : public Work {
public:
    GlooWork(std::shared_ptr<GlooCommunicator> owner, c10::intrusive_ptr<c10d::Work> work, const char *op,
             CollectiveTracker::Ticket ticket, at::Tensor avg_target, int32_t divisor);
    void wait() override;
    double completed_at() const override { return done_->load(); }

private:
    std::shared_ptr<GlooCommunicator> owner_;
    c10::intrusive_ptr<c10d::Work> work_;
    const char *op_;
    CollectiveTracker::Ticket ticket_;
    at::Tensor avg_target_;
    int32_t divisor_;
    std::shared_ptr<std::atomic<double>> done_ = std::make_shared<std::atomic<double>>(0.0);
    bool waited_ = false;
};

// A send or receive posted by send_async / recv_async, waited as the blocking ones are. Dropped unwaited before it
// completed, it is given up (aborted and kept, see bury): Gloo would otherwise go on with a freed buffer.
class GlooP2PWork : public Work {
public:
    GlooP2PWork(std::shared_ptr<GlooCommunicator> owner, c10::intrusive_ptr<c10d::Work> work, const char *op)
        : owner_(std::move(owner)), work_(std::move(work)), op_(op) {}
    ~GlooP2PWork() override;
    void wait() override;
    double completed_at() const override { return at_; }

private:
    std::shared_ptr<GlooCommunicator> owner_;
    c10::intrusive_ptr<c10d::Work> work_; // holds the tensor Gloo reads or writes
    const char *op_;
    double at_ = 0.0;
};

class GlooCommunicator : public Communicator, public std::enable_shared_from_this<GlooCommunicator> {
public:
    GlooCommunicator(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg,
                     std::vector<int32_t> global_ranks, std::string id)
        : shared_(std::move(shared)), pg_(std::move(pg)), global_(std::move(global_ranks)),
          tracked_(std::make_shared<Tracked>())
    {
        tracked_->id = std::move(id);
        tracked_->members = global_;
        tracked_->me = global_[static_cast<size_t>(pg_->getRank())];
        if (shared_->monitor) shared_->monitor->track(tracked_);
    }

    const char *backend() const override { return "gloo"; }
    int32_t rank() const override { return pg_->getRank(); }
    int32_t size() const override { return pg_->getSize(); }
    std::chrono::milliseconds timeout() const override { return shared_->timeout; }

    std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) override
    {
        return guard("allreduce", [&] {
            require_contiguous(tensor, "allreduce");
            std::vector<at::Tensor> v{tensor};
            c10d::AllreduceOptions o;
            o.reduceOp = to_c10d(op);
            auto ticket = tracked_->tracker.issue("all_reduce");
            auto w = pg_->allreduce(v, o);
            return std::make_shared<GlooWork>(shared_from_this(), w, "allreduce", ticket,
                                              op == ReduceOp::Avg ? tensor : at::Tensor(), size());
        });
    }

    std::vector<at::Tensor> allgather(const at::Tensor &tensor) override
    {
        return guard("allgather", [&] {
            at::Tensor in = tensor.contiguous();
            std::vector<std::vector<at::Tensor>> out(1);
            for (int i = 0; i < size(); ++i) out[0].push_back(at::empty_like(in));
            std::vector<at::Tensor> inputs{in};
            auto ticket = tracked_->tracker.issue("all_gather");
            wait_collective(*pg_->allgather(out, inputs), ticket);
            return out[0];
        });
    }

    void broadcast(at::Tensor &tensor, int32_t root) override
    {
        check_rank(root, "root");
        guard("broadcast", [&] {
            require_contiguous(tensor, "broadcast");
            std::vector<at::Tensor> v{tensor};
            c10d::BroadcastOptions o;
            o.rootRank = root;
            auto ticket = tracked_->tracker.issue("broadcast");
            wait_collective(*pg_->broadcast(v, o), ticket);
            return 0;
        });
    }

    at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp op) override
    {
        if (input.dim() < 1 || input.size(0) % size() != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "reduce_scatter: dimension 0 (" + std::to_string(input.dim() ? input.size(0) : 0) +
                                                 ") must be a multiple of the number of processes (" +
                                                 std::to_string(size()) + ")");
        const int32_t n = size(), r = rank();
        const int64_t chunk = input.size(0) / n;
        if (n == 1) return input.clone(at::MemoryFormat::Contiguous);
        if (op != ReduceOp::Sum) { // other operations are rare here: all-reduce, then keep this rank's chunk
            at::Tensor all = input.clone(at::MemoryFormat::Contiguous);
            allreduce(all, op);
            return all.narrow(0, chunk * r, chunk).clone();
        }
        // ProcessGroupGloo (LibTorch 1.13) has no reduce_scatter: a ring of sends and receives. At step s rank r
        // passes its partial sum of chunk r-s-1 on to rank r+1 and adds rank r-1's partial sum of chunk r-s-2 to
        // its own; after n-1 steps it holds chunk r summed over every rank. Half the bytes of an all-reduce.
        return guard("reduce_scatter", [&] {
            const at::Tensor in = input.contiguous();
            auto index = [n](int64_t i) { return ((i % n) + n) % n; };
            at::Tensor work = in.narrow(0, index(r - 1) * chunk, chunk);
            at::Tensor incoming = at::empty_like(work);
            auto ticket = tracked_->tracker.issue("reduce_scatter");
            for (int32_t step = 0; step < n - 1; ++step) {
                std::vector<at::Tensor> out{work}, got{incoming};
                auto sent = pg_->send(out, static_cast<int>(index(r + 1)), kReduceScatterTag + step);
                wait_p2p(pg_->recv(got, static_cast<int>(index(r - 1)), kReduceScatterTag + step), ticket);
                wait_p2p(sent, ticket);
                work = in.narrow(0, index(r - step - 2) * chunk, chunk) + incoming;
            }
            return work;
        });
    }

    void send(const at::Tensor &tensor, int32_t dst, int32_t tag) override { send_async(tensor, dst, tag)->wait(); }
    void recv(at::Tensor &tensor, int32_t src, int32_t tag) override { recv_async(tensor, src, tag)->wait(); }

    std::shared_ptr<Work> send_async(const at::Tensor &tensor, int32_t dst, int32_t tag) override
    {
        check_rank(dst, "dst");
        return guard("send", [&] {
            std::vector<at::Tensor> v{tensor.contiguous()};
            return std::make_shared<GlooP2PWork>(shared_from_this(), pg_->send(v, dst, tag), "send");
        });
    }

    bool send_async_blocks() const override { return false; }

    std::shared_ptr<Work> recv_async(at::Tensor &tensor, int32_t src, int32_t tag) override
    {
        check_rank(src, "src");
        return guard("recv", [&] {
            require_contiguous(tensor, "recv");
            std::vector<at::Tensor> v{tensor};
            return std::make_shared<GlooP2PWork>(shared_from_this(), pg_->recv(v, src, tag), "recv");
        });
    }

    void barrier() override
    {
        guard("barrier", [&] {
            auto ticket = tracked_->tracker.issue("barrier");
            wait_collective(*pg_->barrier(), ticket);
            return 0;
        });
    }

    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) override
    {
        for (size_t i = 0; i < ranks.size(); ++i) {
            check_rank(ranks[i], "ranks");
            if (i > 0 && ranks[i] <= ranks[i - 1])
                fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected sorted, unique ranks");
        }
        if (ranks.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected at least one rank");
        int64_t id;
        {
            std::lock_guard<std::mutex> l(shared_->m);
            id = shared_->groups++;
        }
        auto it = std::find(ranks.begin(), ranks.end(), rank());
        if (it == ranks.end()) return nullptr;
        return guard("new_group", [&]() -> std::shared_ptr<Communicator> {
            auto store = c10::make_intrusive<c10d::PrefixStore>("accel/group/" + std::to_string(id) + "/", shared_->store);
            auto opts = c10d::ProcessGroupGloo::Options::create(shared_->timeout);
            opts->devices.push_back(shared_->device);
            opts->threads = 2;
            auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, static_cast<int>(it - ranks.begin()),
                                                                  static_cast<int>(ranks.size()), opts);
            std::vector<int32_t> global;
            for (int32_t r : ranks) global.push_back(global_[static_cast<size_t>(r)]);
            return std::make_shared<GlooCommunicator>(shared_, pg, global, "group " + std::to_string(id));
        });
    }

    // Runs a c10d call; turns its failure into UNAVAILABLE / DEADLINE_EXCEEDED naming the lost rank.
    template <class F>
    auto guard(const char *op, F &&f) -> decltype(f())
    {
        check_poison(op);
        try {
            return f();
        } catch (const Error &) {
            throw;
        } catch (const std::bad_alloc &) {
            out_of_memory(op, "std::bad_alloc");
        } catch (const TrackedFailure &e) {
            if (is_out_of_memory(e.what())) out_of_memory(op, e.what());
            failed(op, e.what(), &e.ticket);
        } catch (const std::exception &e) {
            if (is_out_of_memory(e.what())) out_of_memory(op, e.what());
            failed(op, e.what(), nullptr);
        }
    }

    // An allocation failed in a collective (its buffers, or Gloo's): this rank's failure, not a peer's. The
    // communicator is poisoned (the peers may be in the collective without this rank) and the peers learn
    // "rank r ran out of memory" on the next heartbeat.
    [[noreturn]] void out_of_memory(const char *op, const std::string &what)
    {
        const std::string full = "gloo " + std::string(op) + " on rank " + std::to_string(global_[rank()]) + ": " +
                                 out_of_memory_message(first_line(what));
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = full;
        }
        if (shared_->monitor) shared_->monitor->publish_failure(ACCEL_ERR_RESOURCE_EXHAUSTED, full);
        fail(ACCEL_ERR_RESOURCE_EXHAUSTED, full);
    }

    void note_out_of_memory(const std::string &message) override
    {
        if (shared_->monitor) shared_->monitor->note_out_of_memory(message);
    }

    // Waits for collective `ticket`'s work in slices, so that a verdict of the monitor (a peer that is not in this
    // collective, or that failed) ends the wait. A collective that completes within the first slice costs what a
    // plain wait does. c10d's Work::wait(timeout) leaves the operation running when the slice expires.
    void wait_collective(c10d::Work &w, const CollectiveTracker::Ticket &ticket)
    {
        CollectiveTracker::Wait waiting(tracked_->tracker, ticket);
        try {
            const auto deadline = std::chrono::steady_clock::now() + shared_->timeout;
            for (;;) {
                if (w.isCompleted()) { // returns, or throws what the operation threw
                    w.wait();
                    return;
                }
                auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
                if (left <= 0ms) throw std::runtime_error("Operation timed out!");
                try {
                    w.wait(std::min<std::chrono::milliseconds>(left, kPollSlice));
                    return;
                } catch (const std::exception &) {
                    if (!w.isCompleted()) check_verdict(); // else: completed meanwhile, the next pass says how
                }
            }
        } catch (const Error &) {
            throw;
        } catch (const std::exception &e) {
            throw TrackedFailure(e.what(), ticket);
        }
    }

    // A send or receive of collective `ticket` (reduce_scatter's ring): waited in whole, and aborted by the monitor
    // on a verdict (Gloo's unbound buffers end a wait when aborted; a timed-out wait would close every pair).
    void wait_p2p(const c10::intrusive_ptr<c10d::Work> &w, const CollectiveTracker::Ticket &ticket)
    {
        CollectiveTracker::Wait waiting(tracked_->tracker, ticket);
        {
            std::lock_guard<std::mutex> l(tracked_->m);
            tracked_->p2p.push_back(w);
        }
        auto unregister = [&] {
            std::lock_guard<std::mutex> l(tracked_->m);
            tracked_->p2p.erase(std::find(tracked_->p2p.begin(), tracked_->p2p.end(), w));
        };
        bool done = false;
        try {
            check_verdict(); // one set before this work was registered aborted nothing
            done = w->wait(shared_->timeout);
        } catch (const Error &) {
            unregister();
            bury(w);
            throw;
        } catch (const std::exception &e) {
            unregister();
            check_verdict();
            throw TrackedFailure(e.what(), ticket);
        }
        unregister();
        check_verdict(); // aborted by the monitor
        if (!done) throw TrackedFailure("the operation was aborted", ticket);
    }

    // A verdict of the monitor ends the collective: the communicator is poisoned with it, and peers learn of it
    // from this rank's next heartbeat.
    void check_verdict()
    {
        auto v = tracked_->tracker.verdict();
        if (!v) return;
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = v->message;
        }
        if (shared_->monitor) shared_->monitor->publish_failure(v->code, v->message);
        fail(v->code, v->message);
    }

    void check_poison(const char *op)
    {
        std::lock_guard<std::mutex> l(shared_->m);
        if (!shared_->poison.empty())
            fail(ACCEL_ERR_ABORTED, std::string("gloo ") + op + ": communication already failed: " + shared_->poison);
    }

    [[noreturn]] void failed(const char *op, const std::string &what, const CollectiveTracker::Ticket *ticket)
    {
        std::string msg = first_line(what);
        bool timed_out = msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos ||
                         msg.find("timeout") != std::string::npos;
        accel_status_t peer_failed = ACCEL_OK;
        std::string who = !shared_->monitor ? ""
                          : ticket      ? shared_->monitor->diagnose(&peer_failed, tracked_.get(), *ticket)
                                        : shared_->monitor->diagnose(&peer_failed);
        // The collective by its number when it is one (issue 40.5): "gloo all_reduce #6 failed ..."
        const std::string collective = ticket != nullptr && ticket->seq > 0
                                     ? describe_collective(ticket->kind, ticket->seq, ticket->purpose ? ticket->purpose : "")
                                     : std::string(op);
        std::string full = "gloo " + collective + " failed on rank " + std::to_string(global_[rank()]) + " of " +
                           std::to_string(global_.size()) + (who.empty() ? "" : ": " + who) +
                           (timed_out ? " (timeout " + seconds(shared_->timeout) + ")" : "") +
                           " [" + msg + "]";
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = full;
        }
        const accel_status_t code = peer_failed != ACCEL_OK ? peer_failed
                                    : timed_out                ? ACCEL_ERR_DEADLINE_EXCEEDED
                                                               : ACCEL_ERR_UNAVAILABLE;
        if (shared_->monitor) shared_->monitor->publish_failure(code, full);
        fail(code, full);
    }

    std::chrono::milliseconds wait_timeout() const { return shared_->timeout; }

private:
    void check_rank(int32_t r, const char *what) const
    {
        if (r < 0 || r >= size())
            fail(ACCEL_ERR_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) + " is not in 0.." +
                                             std::to_string(size() - 1));
    }
    static void require_contiguous(const at::Tensor &t, const char *op)
    {
        if (!t.is_contiguous())
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(op) + ": the tensor must be contiguous");
    }

    std::shared_ptr<Shared> shared_;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
    std::vector<int32_t> global_;
    std::shared_ptr<Tracked> tracked_;
};

GlooWork::GlooWork(std::shared_ptr<GlooCommunicator> owner, c10::intrusive_ptr<c10d::Work> work, const char *op,
                   CollectiveTracker::Ticket ticket, at::Tensor avg_target, int32_t divisor)
    : owner_(owner), work_(std::move(work)), op_(op), ticket_(ticket), avg_target_(std::move(avg_target)), divisor_(divisor)
{
    auto done = done_;
    try {
        work_->getFuture()->addCallback([done](c10::ivalue::Future &) { done->store(now_seconds()); });
    } catch (const std::exception &) {
        // No future: completed_at() is taken when wait() returns.
    }
}

GlooP2PWork::~GlooP2PWork()
{
    if (at_ == 0.0 && !work_->isCompleted()) bury(work_);
}

void GlooP2PWork::wait()
{
    if (at_ != 0.0) return;
    owner_->guard(op_, [&] {
        work_->wait(owner_->wait_timeout());
        return 0;
    });
    at_ = now_seconds();
}

void GlooWork::wait()
{
    if (waited_) return;
    owner_->guard(op_, [&] {
        owner_->wait_collective(*work_, ticket_);
        return 0;
    });
    waited_ = true;
    if (done_->load() == 0.0) done_->store(now_seconds());
    if (avg_target_.defined()) {
        if (at::isFloatingType(avg_target_.scalar_type())) avg_target_.div_(divisor_);
        else avg_target_.div_(divisor_, "floor");
    }
}

} // namespace

std::shared_ptr<Communicator> make_gloo_communicator(const config::AcceleratorConfig &c)
{
    const auto &t = c.topology;
    Rendezvous r = rendezvous_of(c);
    auto timeout = init_timeout(c);
    const double delay = mismatch_delay();
    auto shared = std::make_shared<Shared>();
    shared->timeout = timeout;
    shared->store = open_store(r, c, "gloo");
    std::string local = r.kind == Rendezvous::File ? "127.0.0.1" : local_address_towards(r.host, r.port);
    if (const char *ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname != '\0')
        shared->device = c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
    else
        shared->device = c10d::ProcessGroupGloo::createDeviceForHostname(local);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(shared->device);
    opts->threads = 2;
    c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
    try {
        pg = c10::make_intrusive<c10d::ProcessGroupGloo>(
            c10::make_intrusive<c10d::PrefixStore>("accel/world/", shared->store), t.rank, t.world_size, opts);
    } catch (const std::exception &e) {
        fail(ACCEL_ERR_UNAVAILABLE, "gloo: connecting rank " + std::to_string(t.rank) + " of " +
                                        std::to_string(t.world_size) + " to its peers failed: " + first_line(e.what()));
    }
    shared->monitor = std::make_unique<PeerMonitor>("gloo", r, shared->store, t.rank, t.world_size, delay);
    if (g_live == nullptr) {
        g_live = new std::vector<std::shared_ptr<Shared>>();
        std::atexit(stop_monitors_at_exit);
    }
    g_live->push_back(shared);
    std::vector<int32_t> ranks;
    for (int32_t i = 0; i < t.world_size; ++i) ranks.push_back(i);
    return std::make_shared<GlooCommunicator>(shared, pg, ranks, "world");
}

bool gloo_compiled() { return true; }

} // namespace accel::distributed

#else // the LibTorch has no Gloo headers

namespace accel::distributed {

std::shared_ptr<Communicator> make_gloo_communicator(const config::AcceleratorConfig &)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: \"gloo\" was not compiled into this "
                                  "accel: its LibTorch has no Gloo headers (pip's wheels ship none); use \"nccl\" or "
                                  "\"mpi\", or build against a LibTorch with Gloo (Debian's libtorch-dev)");
}

bool gloo_compiled() { return false; }

} // namespace accel::distributed

#endif
