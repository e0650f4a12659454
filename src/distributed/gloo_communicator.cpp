// gloo: LibTorch's c10d ProcessGroupGloo, rendezvous through a TCPStore (env:// or tcp://) or a
// FileStore (file://), opened by rendezvous.cpp (shared with the nccl backend).
//
// Naming the rank that died: every rank writes a heartbeat counter into the store twice a second
// (its own store connection, on its own thread). When a collective fails, the counters are read twice
// 1.6 s apart; ranks whose counter did not move are named in the error. If the store itself cannot be
// reached, rank 0 (which hosts it) is named.
//
// ProcessGroupGloo's header includes Gloo's own headers, which Debian's LibTorch has (libgloo-dev) and
// pip's LibTorch wheels do not ship: CMake defines ACCEL_WITH_GLOO for this file where they are found.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#ifdef ACCEL_WITH_GLOO

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

// Tags of reduce_scatter's ring steps, far from those a caller of send/recv would pick.
constexpr int kReduceScatterTag = 1 << 24;

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

// Heartbeats in the store, and the diagnosis of which rank stopped.
class PeerMonitor {
public:
    PeerMonitor(Rendezvous r, c10::intrusive_ptr<c10d::Store> shared_store, int rank, int world)
        : r_(std::move(r)), shared_(std::move(shared_store)), rank_(rank), world_(world)
    {
        thread_ = std::thread([this] { run(); });
    }
    ~PeerMonitor() { stop(); }

    void stop()
    {
        {
            std::lock_guard<std::mutex> l(m_);
            stop_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

    // A sentence naming the ranks that stopped (best effort, takes ~2 s).
    std::string diagnose()
    {
        // The heartbeat thread's own connection, not a new one: a store client connected while rank 0 is
        // dying can be reset before its callback thread is stopped, which aborts the process
        // (rendezvous.cpp, stop_callback_thread).
        c10::intrusive_ptr<c10d::Store> store;
        {
            std::lock_guard<std::mutex> l(m_);
            store = store_;
        }
        if (!store)
            return rank_ == 0 ? "the rendezvous store is gone"
                              : "rank 0 (which hosts the rendezvous store at " + r_.describe() + ") is unreachable";
        try {
            auto first = read_all(*store);
            std::this_thread::sleep_for(1600ms);
            auto second = read_all(*store);
            std::vector<int> dead;
            for (int r = 0; r < world_; ++r)
                if (r != rank_ && first[r] == second[r]) dead.push_back(r);
            if (dead.empty()) return "every rank is still alive; a peer may be stuck outside the collective";
            std::ostringstream os;
            os << (dead.size() == 1 ? "rank " : "ranks ");
            for (size_t i = 0; i < dead.size(); ++i) os << (i ? ", " : "") << dead[i];
            os << (dead.size() == 1 ? " stopped" : " stopped") << " responding (no heartbeat for 1.6 s)";
            return os.str();
        } catch (const std::exception &) {
            return "rank 0 (which hosts the rendezvous store at " + r_.describe() + ") stopped responding";
        }
    }

private:
    c10::intrusive_ptr<c10d::Store> connection(std::chrono::milliseconds timeout)
    {
        if (r_.kind == Rendezvous::File) return shared_; // FileStore is thread-safe; extra instances would break its cleanup
        return connect_tcp(r_, false, c10::nullopt, timeout);
    }

    std::vector<std::string> read_all(c10d::Store &s)
    {
        std::vector<std::string> out(static_cast<size_t>(world_));
        for (int r = 0; r < world_; ++r) {
            std::string key = "accel/heartbeat/" + std::to_string(r);
            if (!s.check({key})) continue;
            auto v = s.get(key);
            out[static_cast<size_t>(r)] = std::string(v.begin(), v.end());
        }
        return out;
    }

    void run()
    {
        c10::intrusive_ptr<c10d::Store> store;
        try {
            store = connection(10s);
        } catch (const std::exception &) {
            return;
        }
        {
            std::lock_guard<std::mutex> l(m_);
            store_ = store; // TCPStore's operations take their own lock: diagnose() may use it too
        }
        uint64_t beat = 0;
        const std::string key = "accel/heartbeat/" + std::to_string(rank_);
        std::unique_lock<std::mutex> l(m_);
        while (!stop_) {
            l.unlock();
            try {
                std::string v = std::to_string(++beat);
                store->set(key, std::vector<uint8_t>(v.begin(), v.end()));
            } catch (const std::exception &) {
                return; // the store is gone (rank 0 exited); diagnose() says so
            }
            l.lock();
            cv_.wait_for(l, 500ms, [this] { return stop_; });
        }
    }

    Rendezvous r_;
    c10::intrusive_ptr<c10d::Store> shared_;
    c10::intrusive_ptr<c10d::Store> store_; // the heartbeat connection, once made
    int rank_, world_;
    std::mutex m_;
    std::condition_variable cv_;
    bool stop_ = false;
    std::thread thread_;
};

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
             at::Tensor avg_target, int32_t divisor);
    void wait() override;
    double completed_at() const override { return done_->load(); }

private:
    std::shared_ptr<GlooCommunicator> owner_;
    c10::intrusive_ptr<c10d::Work> work_;
    const char *op_;
    at::Tensor avg_target_;
    int32_t divisor_;
    std::shared_ptr<std::atomic<double>> done_ = std::make_shared<std::atomic<double>>(0.0);
    bool waited_ = false;
};

class GlooCommunicator : public Communicator, public std::enable_shared_from_this<GlooCommunicator> {
public:
    GlooCommunicator(std::shared_ptr<Shared> shared, c10::intrusive_ptr<c10d::ProcessGroupGloo> pg,
                     std::vector<int32_t> global_ranks)
        : shared_(std::move(shared)), pg_(std::move(pg)), global_(std::move(global_ranks))
    {
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
            auto w = pg_->allreduce(v, o);
            return std::make_shared<GlooWork>(shared_from_this(), w, "allreduce", op == ReduceOp::Avg ? tensor : at::Tensor(),
                                              size());
        });
    }

    std::vector<at::Tensor> allgather(const at::Tensor &tensor) override
    {
        return guard("allgather", [&] {
            at::Tensor in = tensor.contiguous();
            std::vector<std::vector<at::Tensor>> out(1);
            for (int i = 0; i < size(); ++i) out[0].push_back(at::empty_like(in));
            std::vector<at::Tensor> inputs{in};
            pg_->allgather(out, inputs)->wait(shared_->timeout);
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
            pg_->broadcast(v, o)->wait(shared_->timeout);
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
            for (int32_t step = 0; step < n - 1; ++step) {
                std::vector<at::Tensor> out{work}, got{incoming};
                auto sent = pg_->send(out, static_cast<int>(index(r + 1)), kReduceScatterTag + step);
                pg_->recv(got, static_cast<int>(index(r - 1)), kReduceScatterTag + step)->wait(shared_->timeout);
                sent->wait(shared_->timeout);
                work = in.narrow(0, index(r - step - 2) * chunk, chunk) + incoming;
            }
            return work;
        });
    }

    void send(const at::Tensor &tensor, int32_t dst, int32_t tag) override
    {
        check_rank(dst, "dst");
        guard("send", [&] {
            std::vector<at::Tensor> v{tensor.contiguous()};
            pg_->send(v, dst, tag)->wait(shared_->timeout);
            return 0;
        });
    }

    void recv(at::Tensor &tensor, int32_t src, int32_t tag) override
    {
        check_rank(src, "src");
        guard("recv", [&] {
            require_contiguous(tensor, "recv");
            std::vector<at::Tensor> v{tensor};
            pg_->recv(v, src, tag)->wait(shared_->timeout);
            return 0;
        });
    }

    void barrier() override
    {
        guard("barrier", [&] {
            pg_->barrier()->wait(shared_->timeout);
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
            return std::make_shared<GlooCommunicator>(shared_, pg, global);
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
        } catch (const std::exception &e) {
            failed(op, e.what());
        }
    }

    void check_poison(const char *op)
    {
        std::lock_guard<std::mutex> l(shared_->m);
        if (!shared_->poison.empty())
            fail(ACCEL_ERR_ABORTED, std::string("gloo ") + op + ": communication already failed: " + shared_->poison);
    }

    [[noreturn]] void failed(const char *op, const std::string &what)
    {
        std::string msg = first_line(what);
        bool timed_out = msg.find("Timed out") != std::string::npos || msg.find("timed out") != std::string::npos ||
                         msg.find("timeout") != std::string::npos;
        std::string who = shared_->monitor ? shared_->monitor->diagnose() : "";
        std::string full = std::string("gloo ") + op + " failed on rank " + std::to_string(global_[rank()]) + " of " +
                           std::to_string(global_.size()) + (who.empty() ? "" : ": " + who) +
                           (timed_out ? " (timeout " + std::to_string(shared_->timeout.count() / 1000.0) + " s)" : "") +
                           " [" + msg + "]";
        {
            std::lock_guard<std::mutex> l(shared_->m);
            if (shared_->poison.empty()) shared_->poison = full;
        }
        fail(timed_out ? ACCEL_ERR_DEADLINE_EXCEEDED : ACCEL_ERR_UNAVAILABLE, full);
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
};

GlooWork::GlooWork(std::shared_ptr<GlooCommunicator> owner, c10::intrusive_ptr<c10d::Work> work, const char *op,
                   at::Tensor avg_target, int32_t divisor)
    : owner_(owner), work_(std::move(work)), op_(op), avg_target_(std::move(avg_target)), divisor_(divisor)
{
    auto done = done_;
    try {
        work_->getFuture()->addCallback([done](c10::ivalue::Future &) { done->store(now_seconds()); });
    } catch (const std::exception &) {
        // No future: completed_at() is taken when wait() returns.
    }
}

void GlooWork::wait()
{
    if (waited_) return;
    owner_->guard(op_, [&] {
        work_->wait(owner_->wait_timeout());
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
    shared->monitor = std::make_unique<PeerMonitor>(r, shared->store, t.rank, t.world_size);
    if (g_live == nullptr) {
        g_live = new std::vector<std::shared_ptr<Shared>>();
        std::atexit(stop_monitors_at_exit);
    }
    g_live->push_back(shared);
    std::vector<int32_t> ranks;
    for (int32_t i = 0; i < t.world_size; ++i) ranks.push_back(i);
    return std::make_shared<GlooCommunicator>(shared, pg, ranks);
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
