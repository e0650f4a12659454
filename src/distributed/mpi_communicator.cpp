// mpi: Open MPI (or any MPI-3 library) for programs started by mpirun. LibTorch 1.13 from Debian has
// no ProcessGroupMPI, so this calls MPI directly. All MPI calls run on one worker thread (initialised
// there with MPI_THREAD_FUNNELED), in submission order, so operations are asynchronous for DDP's
// buckets and every wait has a timeout. Point to point is posted (MPI_Isend / MPI_Irecv) and tested by that thread
// between its tasks, never waited there: a blocked wait would keep the process's later sends and receives from being
// posted, and the pipeline's and the ring's transfers run under computation only when posted at once. A rank that dies is reported by mpirun, which ends the job;
// a rank that stops answering makes the others fail with ACCEL_ERR_DEADLINE_EXCEEDED after the
// timeout. MPI does not say which rank is missing, so the ranks keep gloo's heartbeat (peer_monitor.hpp) in a
// store of their own - rank 0 hosts it at a free port, MASTER_ADDR or its host name, sent to the others with
// MPI_Bcast - and a timeout names the collective and the silent ranks; a peer's failure or a mismatched
// collective ends a wait early. A blocking MPI call cannot be cancelled: after such a failure the MPI thread
// stays in it, the communicator is poisoned, and MPI is not finalized at exit.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#ifdef ACCEL_WITH_MPI

#include "distributed/peer_monitor.hpp"
#include "distributed/rendezvous.hpp"

// The C API only: no MPI C++ bindings (libmpi_cxx is not linked).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace accel::distributed {

namespace {

using namespace std::chrono_literals;

// How often a waiting collective looks for the monitor's verdict (as gloo's).
constexpr std::chrono::milliseconds kPollSlice{200};

// The heartbeat of this process (one MPI world per process): the monitor and its store, the poison.
struct MpiShared {
    c10::intrusive_ptr<c10d::Store> store;
    std::unique_ptr<PeerMonitor> monitor;
    int64_t groups = 0; // new_group calls so far: a group's record name
};
MpiShared *g_shared = nullptr;

class MpiWork : public Work {
public:
    // `tracked` and `ticket` (seq 0: not a collective) say which collective waits, for the monitor.
    MpiWork(std::chrono::milliseconds timeout, std::string what, std::shared_ptr<Tracked> tracked = nullptr,
            CollectiveTracker::Ticket ticket = {})
        : timeout_(timeout), what_(std::move(what)), tracked_(std::move(tracked)), ticket_(ticket)
    {
    }
    void finish(std::exception_ptr e)
    {
        {
            std::lock_guard<std::mutex> l(m_);
            done_ = true;
            error_ = e;
            at_ = now_seconds();
        }
        cv_.notify_all();
    }
    void wait() override;
    double completed_at() const override
    {
        std::lock_guard<std::mutex> l(m_);
        return at_;
    }
    bool done() const
    {
        std::lock_guard<std::mutex> l(m_);
        return done_;
    }
    std::function<void()> after; // runs on the waiting thread once done (Avg's division)

private:
    [[noreturn]] void fail_poisoned(accel_status_t code, const std::string &message);

    std::chrono::milliseconds timeout_;
    std::string what_;
    std::shared_ptr<Tracked> tracked_;
    CollectiveTracker::Ticket ticket_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
    double at_ = 0.0;
    bool after_done_ = false;
};

// A send or receive posted by send_async / recv_async. The MPI thread owns it until MPI says it finished: the
// request, and the tensor MPI reads or writes, which must outlive the request even when its work was dropped.
struct P2P {
    MPI_Request request = MPI_REQUEST_NULL;
    at::Tensor tensor;
    std::string what; // "send to rank 1 (tag 7)": the errors' subject
    bool receive = false;
    std::weak_ptr<MpiWork> work;      // expired once dropped
    std::atomic<bool> dropped{false}; // set by the work dropped unfinished: the MPI thread cancels the request
    bool cancelled = false;
};

// The work of a P2P. Dropped before it finished, it gives the transfer up: MPI_Cancel (Open MPI cancels receives; a
// send goes on until received, or until the exit frees it), the buffer left to the MPI thread.
class MpiP2PWork : public MpiWork {
public:
    MpiP2PWork(std::chrono::milliseconds timeout, std::shared_ptr<P2P> p2p, std::shared_ptr<Tracked> tracked)
        : MpiWork(timeout, p2p->what, std::move(tracked)), p2p_(std::move(p2p))
    {
    }
    ~MpiP2PWork() override;
    void wait() override;

private:
    std::shared_ptr<P2P> p2p_;
};

// The thread that owns MPI.
class MpiWorker {
public:
    MpiWorker()
    {
        thread_ = std::thread([this] { run(); });
        std::unique_lock<std::mutex> l(m_);
        cv_.wait(l, [this] { return started_; });
        if (!init_error_.empty()) {
            l.unlock();
            thread_.join();
            fail(ACCEL_ERR_UNAVAILABLE, init_error_);
        }
    }

    void submit(std::function<void()> task)
    {
        {
            std::lock_guard<std::mutex> l(m_);
            queue_.push_back(std::move(task));
        }
        cv_.notify_all();
    }

    // On the MPI thread: a transfer just posted, tested from now on until it finished.
    void keep(std::shared_ptr<P2P> p) { pending_.push_back(std::move(p)); }

    // Has the MPI thread test its transfers now (a work was dropped, or is waited for).
    void nudge()
    {
        {
            std::lock_guard<std::mutex> l(m_);
            nudged_ = true;
        }
        cv_.notify_all();
    }
    std::atomic<int> waiters{0}; // threads in the wait of a transfer: the MPI thread tests often then

    // At exit: finalize MPI unless an operation is stuck (then the thread is left to the exit).
    void shutdown(bool stuck)
    {
        {
            std::lock_guard<std::mutex> l(m_);
            stop_ = true;
        }
        cv_.notify_all();
        if (stuck) thread_.detach();
        else if (thread_.joinable()) thread_.join();
    }

    int world_rank = 0, world_size = 1;
    std::mutex poison_m;
    std::string poison;

private:
    void run()
    {
        int provided = 0;
        int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        {
            std::lock_guard<std::mutex> l(m_);
            if (rc != MPI_SUCCESS) init_error_ = "mpi: MPI_Init_thread failed with code " + std::to_string(rc);
            else {
                MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
                MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
                MPI_Comm_size(MPI_COMM_WORLD, &world_size);
            }
            started_ = true;
        }
        cv_.notify_all();
        if (rc != MPI_SUCCESS) return;
        for (;;) {
            std::function<void()> task;
            {
                std::unique_lock<std::mutex> l(m_);
                const auto ready = [this] { return stop_ || nudged_ || !queue_.empty(); };
                if (pending_.empty()) cv_.wait(l, ready);
                else cv_.wait_for(l, poll_delay(), ready);
                nudged_ = false;
                if (!queue_.empty()) {
                    task = std::move(queue_.front());
                    queue_.pop_front();
                } else if (stop_) break;
            }
            progress(); // first: a work dropped before this task was submitted is cancelled before the task runs
            if (!task) continue;
            task();
            idle_polls_ = 0;
            progress();
        }
        give_up_pending();
        MPI_Finalize();
    }

    // How long the MPI thread sleeps between tests of its transfers: short while a thread waits for one, else
    // longer the longer nothing finished (a transfer under computation needs tests to progress, but each takes CPU
    // from that computation).
    std::chrono::microseconds poll_delay() const
    {
        constexpr std::chrono::microseconds kWaited{20}, kLongest{1000};
        if (waiters.load() > 0) return kWaited;
        return std::min(kLongest, kWaited * (1 << std::min(idle_polls_, 6)));
    }

    void progress();
    bool test(P2P &p);
    void give_up_pending();

    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    bool started_ = false, stop_ = false, nudged_ = false;
    std::string init_error_;
    // The MPI thread's alone: the posted transfers; the buffers of transfers that failed (MPI may still hold them).
    std::vector<std::shared_ptr<P2P>> pending_;
    std::vector<at::Tensor> failed_buffers_;
    int idle_polls_ = 0; // tests in a row that finished nothing
};

MpiWorker *g_worker = nullptr;
std::atomic<bool> g_stuck{false};

void shutdown_at_exit()
{
    if (g_worker != nullptr) g_worker->shutdown(g_stuck.load());
}

// Registered after the heartbeat store was opened, so it runs before the store's host stops (StoreServer::stop_all,
// registered when it started): the last beat, which may say this rank's failure, still reaches it.
void stop_heartbeat_at_exit()
{
    if (g_shared != nullptr && g_shared->monitor) g_shared->monitor->stop();
}

// "6 s", "0.5 s" (std::to_string would write "6.000000").
std::string seconds(std::chrono::milliseconds d) { return seconds_text(d.count()); }

// Ends this wait and poisons the communicator; the peers learn of it from the next heartbeat. The MPI thread may
// still be in the collective, so MPI is not finalized at exit.
void MpiWork::fail_poisoned(accel_status_t code, const std::string &message)
{
    g_stuck = true;
    {
        std::lock_guard<std::mutex> p(g_worker->poison_m);
        if (g_worker->poison.empty()) g_worker->poison = message;
    }
    if (g_shared != nullptr && g_shared->monitor) g_shared->monitor->publish_failure(code, message);
    fail(code, message);
}

// Waits in slices, so that a verdict of the monitor (a peer that failed, or is in another collective) ends the
// wait; at the timeout the monitor's diagnosis names the silent ranks and where the live ones are (issue 40.5).
void MpiWork::wait()
{
    std::optional<CollectiveTracker::Wait> waiting;
    if (tracked_ && ticket_.seq > 0) waiting.emplace(tracked_->tracker, ticket_);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    std::unique_lock<std::mutex> l(m_);
    while (!done_) {
        const auto left = deadline - std::chrono::steady_clock::now();
        if (left <= 0ms) break;
        if (cv_.wait_for(l, std::min<std::chrono::steady_clock::duration>(left, kPollSlice), [this] { return done_; }))
            break;
        if (tracked_)
            if (auto v = tracked_->tracker.verdict()) {
                l.unlock();
                fail_poisoned(v->code, v->message);
            }
    }
    if (!done_) {
        l.unlock();
        const std::string collective =
            ticket_.seq > 0 ? describe_collective(ticket_.kind, ticket_.seq, ticket_.purpose ? ticket_.purpose : "") : what_;
        accel_status_t peer_failed = ACCEL_OK;
        const std::string who = g_shared != nullptr && g_shared->monitor
                                    ? g_shared->monitor->diagnose(&peer_failed, tracked_.get(), ticket_)
                                    : "a peer stopped responding";
        fail_poisoned(peer_failed != ACCEL_OK ? peer_failed : ACCEL_ERR_DEADLINE_EXCEEDED,
                      "mpi " + collective + (tracked_ ? tracked_->where() : "") + " did not complete within " +
                          seconds(timeout_) + " on rank " + std::to_string(g_worker->world_rank) + " of " +
                          std::to_string(g_worker->world_size) + ": " + who);
    }
    if (error_) std::rethrow_exception(error_);
    if (after && !after_done_) {
        after_done_ = true;
        l.unlock();
        after();
    }
}

template <class T, int Kind> // Kind: 0 sum, 1 max, 2 min
void reduce_16(void *in, void *inout, int *len, MPI_Datatype *)
{
    auto *a = static_cast<T *>(in);
    auto *b = static_cast<T *>(inout);
    for (int i = 0; i < *len; ++i) {
        float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
        b[i] = static_cast<T>(Kind == 0 ? x + y : Kind == 1 ? (x > y ? x : y) : (x < y ? x : y));
    }
}

struct Ops16 {
    MPI_Op half[3], bf16[3];
};
Ops16 *g_ops16 = nullptr; // created on the worker thread at start

MPI_Datatype mpi_type(at::ScalarType t)
{
    switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kShort: return MPI_INT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;
    default: fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("mpi: unsupported dtype ") + c10::toString(t));
    }
}

MPI_Op mpi_op(ReduceOp op, at::ScalarType t)
{
    int k = op == ReduceOp::Max ? 1 : op == ReduceOp::Min ? 2 : 0;
    if (t == at::kHalf) return g_ops16->half[k];
    if (t == at::kBFloat16) return g_ops16->bf16[k];
    if (t == at::kBool && k == 0) return MPI_LOR;
    return k == 1 ? MPI_MAX : k == 2 ? MPI_MIN : MPI_SUM;
}

int checked_count(const at::Tensor &t)
{
    if (t.numel() > INT32_MAX) fail(ACCEL_ERR_INVALID_ARGUMENT, "mpi: tensors above 2^31 elements are not supported");
    return static_cast<int>(t.numel());
}

Error mpi_error(int rc, const std::string &op)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    return Error(ACCEL_ERR_UNAVAILABLE, "mpi " + op + " failed on rank " + std::to_string(g_worker->world_rank) + ": " +
                                            std::string(text, static_cast<size_t>(len)));
}

void check_mpi(int rc, const char *op)
{
    if (rc != MPI_SUCCESS) throw mpi_error(rc, op);
}

// Whether transfer `p` finished (then its work, if any, is told, with the failure if it failed).
bool MpiWorker::test(P2P &p)
{
    if (p.dropped && !p.cancelled) {
        MPI_Cancel(&p.request); // a failure leaves the request as it was: tested as before
        p.cancelled = true;
    }
    int finished = 0;
    MPI_Status status;
    const int rc = MPI_Test(&p.request, &finished, &status);
    std::exception_ptr error;
    if (rc != MPI_SUCCESS) {
        error = std::make_exception_ptr(mpi_error(rc, p.what));
        failed_buffers_.push_back(p.tensor); // the request's state is unknown: its buffer is kept to the end
    } else if (finished == 0) return false;
    else if (p.receive && !p.cancelled) {
        int count = 0;
        MPI_Get_count(&status, mpi_type(p.tensor.scalar_type()), &count);
        if (count != p.tensor.numel()) // a longer message fails MPI_Test (truncated); a shorter one lands here
            error = std::make_exception_ptr(Error(
                ACCEL_ERR_FAILED_PRECONDITION, "mpi " + p.what + " on rank " + std::to_string(world_rank) + ": received " +
                                                   std::to_string(count) + " elements, expected " + std::to_string(p.tensor.numel())));
    }
    if (auto w = p.work.lock()) w->finish(error);
    return true;
}

void MpiWorker::progress()
{
    bool any = false;
    for (size_t i = 0; i < pending_.size();)
        if (test(*pending_[i])) {
            pending_[i] = std::move(pending_.back());
            pending_.pop_back();
            any = true;
        } else ++i;
    idle_polls_ = any ? 0 : idle_polls_ + 1;
}

// At exit, the transfers nobody waited for: cancelled and given a second, then freed (a send nobody receives never
// ends, and MPI_Finalize would wait for it). Their buffers stay with the thread, which is never destroyed.
void MpiWorker::give_up_pending()
{
    for (auto &p : pending_) p->dropped = true;
    const auto until = std::chrono::steady_clock::now() + 1s;
    while (!pending_.empty() && std::chrono::steady_clock::now() < until) {
        progress();
        if (!pending_.empty()) std::this_thread::sleep_for(1ms);
    }
    for (auto &p : pending_)
        if (p->request != MPI_REQUEST_NULL) MPI_Request_free(&p->request);
}

MpiP2PWork::~MpiP2PWork()
{
    if (done()) return;
    p2p_->dropped = true;
    g_worker->nudge();
}

void MpiP2PWork::wait()
{
    struct Waiting { // the MPI thread tests often while a thread waits
        Waiting() { ++g_worker->waiters; g_worker->nudge(); }
        ~Waiting() { --g_worker->waiters; }
    } waiting;
    MpiWork::wait();
}

class MpiCommunicator : public Communicator, public std::enable_shared_from_this<MpiCommunicator> {
public:
    // `global`: the world ranks of this communicator's ranks; `id` its record on the heartbeat ("world", "group 0").
    MpiCommunicator(MPI_Comm comm, int rank, std::vector<int32_t> global, std::chrono::milliseconds timeout,
                    std::string id)
        : comm_(comm), rank_(rank), size_(static_cast<int>(global.size())), timeout_(timeout),
          tracked_(std::make_shared<Tracked>())
    {
        tracked_->id = std::move(id);
        tracked_->members = std::move(global);
        tracked_->me = tracked_->members[static_cast<size_t>(rank_)];
        if (g_shared != nullptr && g_shared->monitor) g_shared->monitor->track(tracked_);
    }

    const char *backend() const override { return "mpi"; }
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return size_; }
    std::chrono::milliseconds timeout() const override { return timeout_; }

    std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) override
    {
        contiguous(tensor, "allreduce");
        at::Tensor t = tensor;
        auto w = submit("allreduce", "all_reduce", [t, op, this] {
            check_mpi(MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), checked_count(t), mpi_type(t.scalar_type()),
                                    mpi_op(op, t.scalar_type()), comm_),
                      "allreduce");
        });
        if (op == ReduceOp::Avg) {
            int n = size_;
            w->after = [t, n]() mutable {
                if (at::isFloatingType(t.scalar_type())) t.div_(n);
                else t.div_(n, "floor");
            };
        }
        return w;
    }

    std::vector<at::Tensor> allgather(const at::Tensor &tensor) override
    {
        at::Tensor in = tensor.contiguous();
        std::vector<int64_t> shape{size_};
        for (auto s : in.sizes()) shape.push_back(s);
        at::Tensor out = at::empty(shape, in.options());
        submit("allgather", "all_gather", [in, out, this] {
            MPI_Datatype ty = mpi_type(in.scalar_type());
            int n = checked_count(in);
            check_mpi(MPI_Allgather(in.data_ptr(), n, ty, out.data_ptr(), n, ty, comm_), "allgather");
        })->wait();
        std::vector<at::Tensor> parts;
        for (int i = 0; i < size_; ++i) parts.push_back(out[i]);
        return parts;
    }

    void broadcast(at::Tensor &tensor, int32_t root) override
    {
        check_rank(root, "root");
        contiguous(tensor, "broadcast");
        at::Tensor t = tensor;
        submit("broadcast", "broadcast", [t, root, this] {
            check_mpi(MPI_Bcast(t.data_ptr(), checked_count(t), mpi_type(t.scalar_type()), root, comm_), "broadcast");
        })->wait();
    }

    at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp op) override
    {
        if (input.dim() < 1 || input.size(0) % size_ != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "reduce_scatter: dimension 0 must be a multiple of the number of processes (" +
                                                 std::to_string(size_) + ")");
        at::Tensor in = input.contiguous();
        at::Tensor out = at::empty_like(in.narrow(0, 0, in.size(0) / size_)).contiguous();
        auto w = submit("reduce_scatter", "reduce_scatter", [in, out, op, this] {
            check_mpi(MPI_Reduce_scatter_block(in.data_ptr(), out.data_ptr(), checked_count(out),
                                               mpi_type(in.scalar_type()), mpi_op(op, in.scalar_type()), comm_),
                      "reduce_scatter");
        });
        w->wait();
        if (op == ReduceOp::Avg) {
            if (at::isFloatingType(out.scalar_type())) out.div_(size_);
            else out.div_(size_, "floor");
        }
        return out;
    }

    void send(const at::Tensor &tensor, int32_t dst, int32_t tag) override { send_async(tensor, dst, tag)->wait(); }
    void recv(at::Tensor &tensor, int32_t src, int32_t tag) override { recv_async(tensor, src, tag)->wait(); }

    std::shared_ptr<Work> send_async(const at::Tensor &tensor, int32_t dst, int32_t tag) override
    {
        check_rank(dst, "dst");
        return post(tensor.contiguous(), dst, tag, false);
    }

    std::shared_ptr<Work> recv_async(at::Tensor &tensor, int32_t src, int32_t tag) override
    {
        check_rank(src, "src");
        contiguous(tensor, "recv");
        return post(tensor, src, tag, true);
    }

    bool send_async_blocks() const override { return false; }

    void barrier() override
    {
        submit("barrier", "barrier", [this] { check_mpi(MPI_Barrier(comm_), "barrier"); })->wait();
    }

    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) override
    {
        if (ranks.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected at least one rank");
        for (size_t i = 0; i < ranks.size(); ++i) {
            check_rank(ranks[i], "ranks");
            if (i > 0 && ranks[i] <= ranks[i - 1]) fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected sorted, unique ranks");
        }
        int key = -1;
        for (size_t i = 0; i < ranks.size(); ++i)
            if (ranks[i] == rank_) key = static_cast<int>(i);
        const int64_t id = g_shared != nullptr ? g_shared->groups++ : 0; // (new_group runs on the caller's thread)
        auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
        submit("new_group", nullptr, [out, key, this] {
            check_mpi(MPI_Comm_split(comm_, key >= 0 ? 0 : MPI_UNDEFINED, key >= 0 ? key : 0, out.get()), "new_group");
            if (*out != MPI_COMM_NULL) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
        })->wait();
        if (key < 0) return nullptr;
        std::vector<int32_t> global;
        for (int32_t r : ranks) global.push_back(tracked_->members[static_cast<size_t>(r)]);
        return std::make_shared<MpiCommunicator>(*out, key, std::move(global), timeout_, "group " + std::to_string(id));
    }

private:
    // MPI_Isend / MPI_Irecv on the MPI thread, which then tests the request between its tasks (MpiWorker::progress).
    std::shared_ptr<Work> post(const at::Tensor &t, int32_t peer, int32_t tag, bool receive)
    {
        if (tag < 0) fail(ACCEL_ERR_INVALID_ARGUMENT, "tag: expected a non-negative tag, got " + std::to_string(tag));
        const MPI_Datatype type = mpi_type(t.scalar_type());
        const int count = checked_count(t);
        check_poison(receive ? "recv" : "send");
        auto p = std::make_shared<P2P>();
        p->what = std::string(receive ? "recv from" : "send to") + " rank " + std::to_string(peer) + " (tag " +
                  std::to_string(tag) + ")";
        p->receive = receive;
        p->tensor = t;
        auto w = std::make_shared<MpiP2PWork>(timeout_, p, tracked_);
        p->work = w;
        g_worker->submit([p, type, count, peer, tag, comm = comm_] {
            void *data = p->tensor.data_ptr();
            const int rc = p->receive ? MPI_Irecv(data, count, type, peer, tag, comm, &p->request)
                                      : MPI_Isend(data, count, type, peer, tag, comm, &p->request);
            if (rc == MPI_SUCCESS) g_worker->keep(p);
            else if (auto posted = p->work.lock()) posted->finish(std::make_exception_ptr(mpi_error(rc, p->what)));
        });
        return w;
    }
    void check_poison(const char *op) const
    {
        std::lock_guard<std::mutex> l(g_worker->poison_m);
        if (!g_worker->poison.empty())
            fail(ACCEL_ERR_ABORTED, std::string("mpi ") + op + ": communication already failed: " + g_worker->poison);
    }
    // `kind` (a string literal, gloo's names): a collective, numbered for the monitor; nullptr for others.
    std::shared_ptr<MpiWork> submit(const char *op, const char *kind, std::function<void()> body)
    {
        check_poison(op);
        const CollectiveTracker::Ticket ticket = kind != nullptr ? tracked_->tracker.issue(kind) : CollectiveTracker::Ticket{};
        auto w = std::make_shared<MpiWork>(timeout_, op, tracked_, ticket);
        g_worker->submit([w, body = std::move(body)] {
            try {
                body();
                w->finish(nullptr);
            } catch (...) {
                w->finish(std::current_exception());
            }
        });
        return w;
    }
    void check_rank(int32_t r, const char *what) const
    {
        if (r < 0 || r >= size_)
            fail(ACCEL_ERR_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) + " is not in 0.." +
                                             std::to_string(size_ - 1));
    }
    static void contiguous(const at::Tensor &t, const char *op)
    {
        if (!t.is_contiguous()) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(op) + ": the tensor must be contiguous");
    }

    MPI_Comm comm_;
    int rank_, size_;
    std::chrono::milliseconds timeout_;
    std::shared_ptr<Tracked> tracked_;
};

// A port nobody listens on now, on this machine (the store binds it a moment later).
int free_port()
{
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) fail(ACCEL_ERR_UNAVAILABLE, std::string("mpi: no socket for the heartbeat store: ") + std::strerror(errno));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    if (port == 0) fail(ACCEL_ERR_UNAVAILABLE, "mpi: no free port for the heartbeat store");
    return port;
}

// The heartbeat store's address, chosen by rank 0 (MASTER_ADDR, else 127.0.0.1 when every rank runs on its machine
// (`one_machine`: mpirun's local size), else its host name; a free port) and sent to every rank with MPI_Bcast:
// mpirun gives no rendezvous of its own.
Rendezvous heartbeat_rendezvous(std::chrono::milliseconds timeout, bool one_machine)
{
    // Shared with the MPI thread: a timed-out wait leaves it writing there after this function returned.
    auto buffer = std::make_shared<std::array<char, 512>>();
    char *text = buffer->data();
    if (g_worker->world_rank == 0) {
        std::string host;
        if (const char *v = std::getenv("MASTER_ADDR"); v != nullptr && *v != '\0') host = v;
        else if (one_machine) host = "127.0.0.1"; // needs no name resolution (a container's host name may have none)
        else {
            char name[256] = {0};
            host = gethostname(name, sizeof name - 1) == 0 && name[0] != '\0' ? name : "127.0.0.1";
        }
        std::snprintf(text, buffer->size(), "%d %s", free_port(), host.substr(0, 400).c_str());
    }
    auto w = std::make_shared<MpiWork>(timeout, "heartbeat store address");
    g_worker->submit([w, buffer] {
        const int rc = MPI_Bcast(buffer->data(), static_cast<int>(buffer->size()), MPI_CHAR, 0, MPI_COMM_WORLD);
        w->finish(rc == MPI_SUCCESS ? nullptr
                                    : std::make_exception_ptr(Error(ACCEL_ERR_UNAVAILABLE, "mpi: MPI_Bcast of the "
                                                                    "heartbeat store's address failed")));
    });
    w->wait();
    text[buffer->size() - 1] = '\0';
    Rendezvous r;
    char *host = nullptr;
    r.port = static_cast<int>(std::strtol(text, &host, 10));
    if (host == nullptr || *host != ' ' || r.port <= 0 || r.port > 65535)
        fail(ACCEL_ERR_INTERNAL, "mpi: rank 0 sent a malformed heartbeat store address");
    r.host = host + 1;
    return r;
}

} // namespace

std::shared_ptr<Communicator> make_mpi_communicator(const config::AcceleratorConfig &c)
{
    auto timeout = init_timeout(c);
    if (g_worker == nullptr) {
        g_worker = new MpiWorker();
        std::atexit(shutdown_at_exit);
        auto w = std::make_shared<MpiWork>(timeout, "init");
        g_worker->submit([w] {
            g_ops16 = new Ops16();
            MPI_Op_create(&reduce_16<c10::Half, 0>, 1, &g_ops16->half[0]);
            MPI_Op_create(&reduce_16<c10::Half, 1>, 1, &g_ops16->half[1]);
            MPI_Op_create(&reduce_16<c10::Half, 2>, 1, &g_ops16->half[2]);
            MPI_Op_create(&reduce_16<c10::BFloat16, 0>, 1, &g_ops16->bf16[0]);
            MPI_Op_create(&reduce_16<c10::BFloat16, 1>, 1, &g_ops16->bf16[1]);
            MPI_Op_create(&reduce_16<c10::BFloat16, 2>, 1, &g_ops16->bf16[2]);
            w->finish(nullptr);
        });
        w->wait();
    }
    if (g_worker->world_size != c.topology.world_size || g_worker->world_rank != c.topology.rank)
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             "mpi: MPI_COMM_WORLD has rank " + std::to_string(g_worker->world_rank) + " of " +
                 std::to_string(g_worker->world_size) + ", but the environment says rank " +
                 std::to_string(c.topology.rank) + " of " + std::to_string(c.topology.world_size) +
                 " (the mpi backend needs a program started by mpirun)");
    if (g_shared == nullptr && g_worker->world_size > 1) { // the heartbeat, once per process (MPI's world is one)
        auto shared = std::make_unique<MpiShared>();
        const Rendezvous r = heartbeat_rendezvous(timeout, c.topology.local_world_size == g_worker->world_size);
        shared->store = open_store(r, c, "mpi (heartbeat store)");
        shared->monitor = std::make_unique<PeerMonitor>("mpi", r, shared->store, g_worker->world_rank,
                                                        g_worker->world_size, mismatch_delay());
        g_shared = shared.release(); // kept until exit
        std::atexit(stop_heartbeat_at_exit);
    }
    std::vector<int32_t> world;
    for (int32_t i = 0; i < g_worker->world_size; ++i) world.push_back(i);
    return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, g_worker->world_rank, std::move(world), timeout, "world");
}

} // namespace accel::distributed

#else // no MPI found at build time

namespace accel::distributed {

std::shared_ptr<Communicator> make_mpi_communicator(const config::AcceleratorConfig &)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: \"mpi\" is not available: accel was "
                                  "built without MPI (install libopenmpi-dev and rebuild)");
}

} // namespace accel::distributed

#endif
