// mpi: Open MPI (or any MPI-3 library) for programs started by mpirun. LibTorch 1.13 from Debian has
// no ProcessGroupMPI, so this calls MPI directly. All MPI calls run on one worker thread (initialised
// there with MPI_THREAD_FUNNELED), in submission order, so operations are asynchronous for DDP's
// buckets and every wait has a timeout. A rank that dies is reported by mpirun, which ends the job;
// a rank that stops answering makes the others fail with ACCEL_ERR_DEADLINE_EXCEEDED after the
// timeout (MPI does not say which rank is missing).
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#ifdef ACCEL_WITH_MPI

// The C API only: no MPI C++ bindings (libmpi_cxx is not linked).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace accel::distributed {

namespace {

class MpiWork : public Work {
public:
    explicit MpiWork(std::chrono::milliseconds timeout, std::string what) : timeout_(timeout), what_(std::move(what)) {}
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
    std::function<void()> after; // runs on the waiting thread once done (Avg's division)

private:
    std::chrono::milliseconds timeout_;
    std::string what_;
    mutable std::mutex m_;
    std::condition_variable cv_;
    bool done_ = false;
    std::exception_ptr error_;
    double at_ = 0.0;
    bool after_done_ = false;
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
                cv_.wait(l, [this] { return stop_ || !queue_.empty(); });
                if (queue_.empty()) break;
                task = std::move(queue_.front());
                queue_.pop_front();
            }
            task();
        }
        MPI_Finalize();
    }

    std::thread thread_;
    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    bool started_ = false, stop_ = false;
    std::string init_error_;
};

MpiWorker *g_worker = nullptr;
std::atomic<bool> g_stuck{false};

void shutdown_at_exit()
{
    if (g_worker != nullptr) g_worker->shutdown(g_stuck.load());
}

void MpiWork::wait()
{
    std::unique_lock<std::mutex> l(m_);
    if (!cv_.wait_for(l, timeout_, [this] { return done_; })) {
        g_stuck = true;
        std::string msg = "mpi " + what_ + " did not complete within " + std::to_string(timeout_.count() / 1000.0) +
                          " s on rank " + std::to_string(g_worker->world_rank) + " of " +
                          std::to_string(g_worker->world_size) +
                          ": a peer stopped responding (MPI does not say which; mpirun names a rank that died)";
        {
            std::lock_guard<std::mutex> p(g_worker->poison_m);
            if (g_worker->poison.empty()) g_worker->poison = msg;
        }
        fail(ACCEL_ERR_DEADLINE_EXCEEDED, msg);
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

void check_mpi(int rc, const char *op)
{
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail(ACCEL_ERR_UNAVAILABLE, std::string("mpi ") + op + " failed on rank " + std::to_string(g_worker->world_rank) +
                                    ": " + std::string(text, static_cast<size_t>(len)));
}

class MpiCommunicator : public Communicator, public std::enable_shared_from_this<MpiCommunicator> {
public:
    MpiCommunicator(MPI_Comm comm, int rank, int size, std::chrono::milliseconds timeout)
        : comm_(comm), rank_(rank), size_(size), timeout_(timeout)
    {
    }

    const char *backend() const override { return "mpi"; }
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return size_; }
    std::chrono::milliseconds timeout() const override { return timeout_; }

    std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) override
    {
        contiguous(tensor, "allreduce");
        at::Tensor t = tensor;
        auto w = submit("allreduce", [t, op, this] {
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
        submit("allgather", [in, out, this] {
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
        submit("broadcast", [t, root, this] {
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
        auto w = submit("reduce_scatter", [in, out, op, this] {
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

    void send(const at::Tensor &tensor, int32_t dst, int32_t tag) override
    {
        check_rank(dst, "dst");
        at::Tensor t = tensor.contiguous();
        submit("send", [t, dst, tag, this] {
            check_mpi(MPI_Send(t.data_ptr(), checked_count(t), mpi_type(t.scalar_type()), dst, tag, comm_), "send");
        })->wait();
    }

    void recv(at::Tensor &tensor, int32_t src, int32_t tag) override
    {
        check_rank(src, "src");
        contiguous(tensor, "recv");
        at::Tensor t = tensor;
        submit("recv", [t, src, tag, this] {
            check_mpi(MPI_Recv(t.data_ptr(), checked_count(t), mpi_type(t.scalar_type()), src, tag, comm_,
                               MPI_STATUS_IGNORE),
                      "recv");
        })->wait();
    }

    void barrier() override
    {
        submit("barrier", [this] { check_mpi(MPI_Barrier(comm_), "barrier"); })->wait();
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
        auto out = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
        submit("new_group", [out, key, this] {
            check_mpi(MPI_Comm_split(comm_, key >= 0 ? 0 : MPI_UNDEFINED, key >= 0 ? key : 0, out.get()), "new_group");
            if (*out != MPI_COMM_NULL) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
        })->wait();
        if (key < 0) return nullptr;
        return std::make_shared<MpiCommunicator>(*out, key, static_cast<int>(ranks.size()), timeout_);
    }

private:
    std::shared_ptr<MpiWork> submit(const char *op, std::function<void()> body)
    {
        {
            std::lock_guard<std::mutex> l(g_worker->poison_m);
            if (!g_worker->poison.empty())
                fail(ACCEL_ERR_ABORTED, std::string("mpi ") + op + ": communication already failed: " + g_worker->poison);
        }
        auto w = std::make_shared<MpiWork>(timeout_, op);
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
};

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
    return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, g_worker->world_rank, g_worker->world_size, timeout);
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
