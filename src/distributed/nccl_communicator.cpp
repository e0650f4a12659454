// NCCL: GPU collectives on NCCL's C API and the CUDA runtime's C API (loaded at first use, see
// nccl_api.hpp), with the ncclUniqueId exchanged through the rendezvous store the gloo backend uses.
//
// STATUS: compiled (ACCEL_WITH_NCCL, against CUDA 13.0's nccl.h 2.28) and linked, and the path up to
// cudaGetDeviceCount has run on a machine without a GPU, where it reports ACCEL_ERR_UNAVAILABLE.
// Everything after that (communicator creation, collectives, timeouts, abort) has NEVER RUN: no
// machine with a GPU was available. Treat it as unverified until tests/distributed passes on GPUs.
//
// Design:
// - One CUDA stream per communicator, created blocking (not cudaStreamNonBlocking), so it orders
//   itself after work LibTorch queued on the legacy default stream. Work LibTorch queued on another
//   stream of its own (a user-set current stream) is NOT waited for: accel cannot see it without
//   LibTorch's CUDA headers.
// - accel's tensors are CPU tensors in a CPU LibTorch. A CPU tensor is staged through pinned host
//   memory and stream-ordered device memory, so no call blocks the host behind a collective that
//   never finishes (a pageable cudaMemcpyAsync would); a CUDA tensor's data_ptr is used directly.
// - Communicators are nonblocking (ncclConfig_t.blocking = 0), and every wait polls with the
//   configured timeout (kwargs_handlers.init_process_group.timeout); on timeout the communicator is
//   aborted with ncclCommAbort so that no call hangs, and later calls fail with ACCEL_ERR_ABORTED.
// - NCCL has no tags: send/recv pairs match in the order they are issued between two ranks.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#ifdef ACCEL_WITH_NCCL
#include "distributed/nccl_api.hpp"
#include "distributed/rendezvous.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>
#endif

namespace accel::distributed {

#ifdef ACCEL_WITH_NCCL

namespace {

using Clock = std::chrono::steady_clock;
const char *const kBackendKey = "kwargs_handlers.init_process_group.backend \"nccl\"";

std::string cuda_error_text(const NcclApi &api, cudaError_t e)
{
    return std::string(api.cudaGetErrorName(e)) + " (" + api.cudaGetErrorString(e) + ")";
}

// What the world communicator and its groups share.
struct Shared {
    c10::intrusive_ptr<c10d::Store> store;
    std::chrono::milliseconds timeout{0};
    int device = 0;
    std::mutex m;
    std::string poison; // first failure
    int64_t groups = 0; // new_group calls so far (same order on every rank)
    std::vector<std::pair<void *, size_t>> pinned; // free pinned host buffers, reused
    const NcclApi *api = nullptr;

    // Every communicator (and so every lent buffer) is gone when the last reference to this goes.
    ~Shared()
    {
        for (auto &b : pinned) api->cudaFreeHost(b.first);
    }
};

class NcclCommunicator;

// Where a CPU tensor's bytes wait in pinned memory until the collective finished.
struct CopyBack {
    void *host = nullptr;
    size_t bytes = 0;
    at::Tensor target;
};

class NcclWork : public Work {
public:
    NcclWork(std::shared_ptr<NcclCommunicator> owner, const char *op, cudaEvent_t event)
        : owner_(std::move(owner)), op_(op), event_(event)
    {
    }
    ~NcclWork() override;
    void wait() override;
    double completed_at() const override { return done_at_; }

    std::vector<CopyBack> copies;   // pinned -> CPU tensor after completion
    std::vector<void *> pinned;     // returned to the pool after completion
    at::Tensor avg_target;          // integer average: sum, then floor division
    int32_t divisor = 1;
    bool launched = false;          // the event was recorded: there is something to wait for

private:
    std::shared_ptr<NcclCommunicator> owner_;
    const char *op_;
    cudaEvent_t event_;
    bool waited_ = false;
    double done_at_ = 0.0;
};

ncclDataType_t nccl_type(at::ScalarType t, const char *op)
{
    switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kHalf: return ncclFloat16;
    case at::kBFloat16: return ncclBfloat16;
    case at::kInt: return ncclInt32;
    case at::kLong: return ncclInt64;
    case at::kChar: return ncclInt8;
    case at::kByte: return ncclUint8;
    case at::kBool: return ncclUint8; // reductions on bool use max/min (see to_nccl)
    default:
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("nccl ") + op + ": dtype " + c10::toString(t) +
                                             " is not supported by NCCL");
    }
}

// NCCL reduction for `op` on `t`; an integer average is a sum divided afterwards (as gloo does).
ncclRedOp_t to_nccl(ReduceOp op, at::ScalarType t, const char *name)
{
    bool floating = at::isFloatingType(t);
    if (t == at::kBool && (op == ReduceOp::Sum || op == ReduceOp::Avg)) {
        if (op == ReduceOp::Avg) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("nccl ") + name + ": avg of bool tensors");
        return ncclMax; // sum of bools is logical or, as in c10d
    }
    switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return floating ? ncclAvg : ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    }
    return ncclSum;
}

accel_status_t status_of(ncclResult_t r)
{
    switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return ACCEL_ERR_INVALID_ARGUMENT;
    case ncclInternalError: return ACCEL_ERR_INTERNAL;
    case ncclUnhandledCudaError:
    case ncclSystemError:
    case ncclRemoteError: return ACCEL_ERR_UNAVAILABLE;
    default: return ACCEL_ERR_UNKNOWN;
    }
}

class NcclCommunicator : public Communicator, public std::enable_shared_from_this<NcclCommunicator> {
public:
    NcclCommunicator(const NcclApi &api, std::shared_ptr<Shared> shared, ncclComm_t comm, cudaStream_t stream,
                     std::vector<int32_t> global_ranks, int32_t rank)
        : api_(api), shared_(std::move(shared)), comm_(comm), stream_(stream), global_(std::move(global_ranks)),
          rank_(rank)
    {
    }

    ~NcclCommunicator() override
    {
        // A poisoned communicator may have work that never ends: abort instead of destroying (which waits).
        api_.cudaSetDevice(shared_->device);
        if (aborted_) {
            // abort_comm() has already aborted and freed it.
        } else if (poisoned()) {
            api_.ncclCommAbort(comm_);
        } else {
            api_.ncclCommDestroy(comm_);
        }
        api_.cudaStreamDestroy(stream_);
    }

    const char *backend() const override { return "nccl"; }
    int32_t rank() const override { return rank_; }
    int32_t size() const override { return static_cast<int32_t>(global_.size()); }
    std::chrono::milliseconds timeout() const override { return shared_->timeout; }

    std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) override
    {
        require_contiguous(tensor, "allreduce");
        ncclDataType_t type = nccl_type(tensor.scalar_type(), "allreduce");
        ncclRedOp_t red = to_nccl(op, tensor.scalar_type(), "allreduce");
        const size_t n = static_cast<size_t>(tensor.numel());
        auto work = launch("allreduce", tensor, tensor, [&](const void *in, void *out) {
            return api_.ncclAllReduce(in, out, n, type, red, comm_, stream_);
        });
        if (op == ReduceOp::Avg && !at::isFloatingType(tensor.scalar_type())) {
            work->avg_target = tensor;
            work->divisor = size();
        }
        return work;
    }

    std::vector<at::Tensor> allgather(const at::Tensor &tensor) override
    {
        at::Tensor in = tensor.contiguous();
        ncclDataType_t type = nccl_type(in.scalar_type(), "allgather");
        const size_t n = static_cast<size_t>(in.numel());
        at::Tensor all = at::empty({size() * in.numel()}, in.options());
        launch("allgather", in, all, [&](const void *src, void *dst) {
            return api_.ncclAllGather(src, dst, n, type, comm_, stream_);
        })->wait();
        std::vector<at::Tensor> out;
        for (int32_t r = 0; r < size(); ++r) out.push_back(all.narrow(0, r * in.numel(), in.numel()).view(in.sizes()));
        return out;
    }

    void broadcast(at::Tensor &tensor, int32_t root) override
    {
        check_rank(root, "root");
        require_contiguous(tensor, "broadcast");
        ncclDataType_t type = nccl_type(tensor.scalar_type(), "broadcast");
        const size_t n = static_cast<size_t>(tensor.numel());
        launch("broadcast", tensor, tensor, [&](const void *in, void *out) {
            return api_.ncclBroadcast(in, out, n, type, root, comm_, stream_);
        })->wait();
    }

    at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp op) override
    {
        if (input.dim() < 1 || input.size(0) % size() != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "reduce_scatter: dimension 0 (" + std::to_string(input.dim() ? input.size(0) : 0) +
                                                 ") must be a multiple of the number of processes (" +
                                                 std::to_string(size()) + ")");
        at::Tensor in = input.contiguous();
        ncclDataType_t type = nccl_type(in.scalar_type(), "reduce_scatter");
        ncclRedOp_t red = to_nccl(op, in.scalar_type(), "reduce_scatter");
        std::vector<int64_t> shape = in.sizes().vec();
        shape[0] /= size();
        at::Tensor out = at::empty(shape, in.options());
        const size_t n = static_cast<size_t>(out.numel());
        auto work = launch("reduce_scatter", in, out, [&](const void *src, void *dst) {
            return api_.ncclReduceScatter(src, dst, n, type, red, comm_, stream_);
        });
        if (op == ReduceOp::Avg && !at::isFloatingType(in.scalar_type())) {
            work->avg_target = out;
            work->divisor = size();
        }
        work->wait();
        return out;
    }

    void send(const at::Tensor &tensor, int32_t dst, int32_t /*tag: NCCL matches in issue order*/) override
    {
        check_rank(dst, "dst");
        at::Tensor in = tensor.contiguous();
        ncclDataType_t type = nccl_type(in.scalar_type(), "send");
        const size_t n = static_cast<size_t>(in.numel());
        launch("send", in, at::Tensor(), [&](const void *src, void *) {
            return api_.ncclSend(src, n, type, dst, comm_, stream_);
        })->wait();
    }

    void recv(at::Tensor &tensor, int32_t src, int32_t /*tag*/) override
    {
        check_rank(src, "src");
        require_contiguous(tensor, "recv");
        ncclDataType_t type = nccl_type(tensor.scalar_type(), "recv");
        const size_t n = static_cast<size_t>(tensor.numel());
        launch("recv", at::Tensor(), tensor, [&](const void *, void *dst) {
            return api_.ncclRecv(dst, n, type, src, comm_, stream_);
        })->wait();
    }

    void barrier() override
    {
        // NCCL has no barrier: an all-reduce of one value, as c10d's ProcessGroupNCCL does.
        at::Tensor one = at::ones({1}, at::kFloat);
        allreduce(one, ReduceOp::Sum);
    }

    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) override
    {
        for (size_t i = 0; i < ranks.size(); ++i) {
            check_rank(ranks[i], "ranks");
            if (i > 0 && ranks[i] <= ranks[i - 1]) fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected sorted, unique ranks");
        }
        if (ranks.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: expected at least one rank");
        check_poison("new_group");
        int64_t id;
        {
            std::lock_guard<std::mutex> l(shared_->m);
            id = shared_->groups++;
        }
        auto it = std::find(ranks.begin(), ranks.end(), rank());
        if (it == ranks.end()) return nullptr;
        std::vector<int32_t> global;
        for (int32_t r : ranks) global.push_back(global_[static_cast<size_t>(r)]);
        return create(api_, shared_, "accel/nccl/group/" + std::to_string(id) + "/", std::move(global),
                      static_cast<int32_t>(it - ranks.begin()));
    }

    // A communicator over `global` (this process is global[rank]): the group's first rank makes the
    // ncclUniqueId and puts it in the store under `prefix`, the others read it from there.
    static std::shared_ptr<NcclCommunicator> create(const NcclApi &api, std::shared_ptr<Shared> shared,
                                                    const std::string &prefix, std::vector<int32_t> global, int32_t rank)
    {
        const int32_t n = static_cast<int32_t>(global.size());
        const std::string where = "nccl: creating the communicator of rank " + std::to_string(global[rank]) +
                                  " (group rank " + std::to_string(rank) + " of " + std::to_string(n) + ")";
        ncclUniqueId id;
        std::memset(&id, 0, sizeof id);
        const std::string key = prefix + "unique_id";
        try {
            if (rank == 0) {
                ncclResult_t r = api.ncclGetUniqueId(&id);
                if (r != ncclSuccess)
                    fail(status_of(r), where + ": ncclGetUniqueId failed: " + api.ncclGetErrorString(r));
                const auto *b = reinterpret_cast<const uint8_t *>(&id);
                shared->store->set(key, std::vector<uint8_t>(b, b + sizeof id));
            } else {
                std::vector<uint8_t> v = shared->store->get(key); // waits up to the store's timeout
                if (v.size() != sizeof id)
                    fail(ACCEL_ERR_INTERNAL, where + ": the store holds " + std::to_string(v.size()) + " bytes under " +
                                                 key + ", expected an ncclUniqueId of " + std::to_string(sizeof id));
                std::memcpy(&id, v.data(), sizeof id);
            }
        } catch (const Error &) {
            throw;
        } catch (const std::exception &e) {
            const std::string msg = first_line(e.what());
            fail(store_failure_status(msg),
                 where + ": exchanging the ncclUniqueId through the rendezvous store failed: " + msg);
        }
        cuda_check(api, api.cudaSetDevice(shared->device), where, "cudaSetDevice");
        cudaStream_t stream = nullptr;
        cuda_check(api, api.cudaStreamCreate(&stream), where, "cudaStreamCreate");
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0; // init and collectives return at once; accel polls with its timeout
        ncclComm_t comm = nullptr;
        ncclResult_t r = api.ncclCommInitRankConfig(&comm, n, id, rank, &config);
        if (r != ncclSuccess && r != ncclInProgress) {
            api.cudaStreamDestroy(stream);
            fail(status_of(r), where + ": ncclCommInitRankConfig failed: " + api.ncclGetErrorString(r));
        }
        auto out = std::make_shared<NcclCommunicator>(api, shared, comm, stream, std::move(global), rank);
        out->settle("init", Clock::now() + shared->timeout); // every rank of the group must arrive in time
        return out;
    }

    static void cuda_check(const NcclApi &api, cudaError_t e, const std::string &where, const char *call)
    {
        if (e == cudaSuccess) return;
        fail(e == cudaErrorMemoryAllocation ? ACCEL_ERR_RESOURCE_EXHAUSTED : ACCEL_ERR_UNAVAILABLE,
             where + ": " + call + " failed: " + cuda_error_text(api, e));
    }

    // Waits for `event` (the end of `op` on the stream) within the timeout; aborts on timeout or error.
    void wait_event(cudaEvent_t event, const char *op)
    {
        const auto deadline = Clock::now() + shared_->timeout;
        auto pause = std::chrono::microseconds(20);
        for (;;) {
            check_poison(op);
            cudaError_t e = api_.cudaEventQuery(event);
            if (e == cudaSuccess) return;
            if (e != cudaErrorNotReady) failed(op, ACCEL_ERR_UNAVAILABLE, "cudaEventQuery: " + cuda_error_text(api_, e));
            ncclResult_t async = ncclSuccess;
            api_.ncclCommGetAsyncError(comm_, &async);
            if (async != ncclSuccess && async != ncclInProgress) failed_async(op, async);
            if (Clock::now() > deadline) timed_out(op);
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(2000));
        }
    }

    void return_pinned(void *p)
    {
        std::lock_guard<std::mutex> l(shared_->m);
        auto it = std::find_if(lent_.begin(), lent_.end(), [&](const auto &b) { return b.first == p; });
        if (it == lent_.end()) return;
        shared_->pinned.push_back(*it);
        lent_.erase(it);
    }

    const NcclApi &api() const { return api_; }

private:
    // Runs `call(send, recv)` on the stream with device pointers for `in` and `out` (either may be
    // undefined; the same tensor twice means in place), staging CPU tensors; returns the pending work.
    template <class Call>
    std::shared_ptr<NcclWork> launch(const char *op, const at::Tensor &in, const at::Tensor &out, Call &&call)
    {
        check_poison(op);
        const std::string where = "nccl " + std::string(op) + " on rank " + std::to_string(global_[rank_]) + " of " +
                                  std::to_string(global_.size());
        cuda_check(api_, api_.cudaSetDevice(shared_->device), where, "cudaSetDevice");
        cudaEvent_t event = nullptr;
        cuda_check(api_, api_.cudaEventCreateWithFlags(&event, cudaEventDisableTiming), where, "cudaEventCreate");
        auto work = std::make_shared<NcclWork>(shared_from_this(), op, event);
        std::vector<void *> device_buffers;
        try {
            const void *src = nullptr;
            void *in_host = nullptr;
            void *in_dev = nullptr;
            if (in.defined()) {
                check_device(in, op);
                const size_t bytes = in.nbytes();
                if (bytes == 0) {
                    src = nullptr; // NCCL touches no buffer for a count of 0
                } else if (in.is_cuda()) {
                    src = in.data_ptr();
                } else {
                    in_host = take_pinned(bytes, where);
                    work->pinned.push_back(in_host);
                    std::memcpy(in_host, in.data_ptr(), bytes);
                    cuda_check(api_, api_.cudaMallocAsync(&in_dev, bytes, stream_), where, "cudaMallocAsync");
                    device_buffers.push_back(in_dev);
                    cuda_check(api_, api_.cudaMemcpyAsync(in_dev, in_host, bytes, cudaMemcpyHostToDevice, stream_),
                               where, "cudaMemcpyAsync");
                    src = in_dev;
                }
            }
            void *dst = nullptr;
            void *out_host = nullptr;
            if (out.defined()) {
                check_device(out, op);
                const size_t bytes = out.nbytes();
                const bool in_place = in.defined() && out.is_same(in);
                if (bytes == 0) {
                    dst = nullptr;
                } else if (out.is_cuda()) {
                    dst = out.data_ptr();
                } else if (in_place) {
                    dst = in_dev;
                    out_host = in_host;
                } else {
                    out_host = take_pinned(bytes, where);
                    work->pinned.push_back(out_host);
                    cuda_check(api_, api_.cudaMallocAsync(&dst, bytes, stream_), where, "cudaMallocAsync");
                    device_buffers.push_back(dst);
                }
                if (out_host != nullptr) work->copies.push_back({out_host, bytes, out});
            }
            ncclResult_t r = call(src, dst);
            if (r != ncclSuccess && r != ncclInProgress) failed(op, status_of(r), describe(r));
            settle(op, Clock::now() + shared_->timeout);
            if (out_host != nullptr)
                cuda_check(api_, api_.cudaMemcpyAsync(out_host, dst, out.nbytes(), cudaMemcpyDeviceToHost, stream_),
                           where, "cudaMemcpyAsync");
            for (void *p : device_buffers) api_.cudaFreeAsync(p, stream_); // stream-ordered: after the copies
            device_buffers.clear();
            cuda_check(api_, api_.cudaEventRecord(event, stream_), where, "cudaEventRecord");
            work->launched = true;
        } catch (const Error &e) {
            for (void *p : device_buffers) api_.cudaFreeAsync(p, stream_);
            // A CUDA failure half-way leaves the peers inside the collective: poison, as failed() does.
            // A bad argument (found before anything was queued) does not.
            if (e.code() != ACCEL_ERR_INVALID_ARGUMENT && e.code() != ACCEL_ERR_ABORTED) poison_with(e.what());
            throw;
        }
        return work;
    }

    // A pinned host buffer of at least `bytes` from the pool, or a new one.
    void *take_pinned(size_t bytes, const std::string &where)
    {
        {
            std::lock_guard<std::mutex> l(shared_->m);
            auto &pool = shared_->pinned;
            // Best fit: a big buffer is not lent to a small collective while a smaller one fits.
            auto it = pool.end();
            for (auto b = pool.begin(); b != pool.end(); ++b)
                if (b->second >= bytes && (it == pool.end() || b->second < it->second)) it = b;
            if (it != pool.end()) {
                lent_.push_back(*it);
                void *p = it->first;
                pool.erase(it);
                return p;
            }
        }
        void *p = nullptr;
        cuda_check(api_, api_.cudaMallocHost(&p, bytes), where, "cudaMallocHost");
        std::lock_guard<std::mutex> l(shared_->m);
        lent_.emplace_back(p, bytes);
        return p;
    }

    // In nonblocking mode a call may return ncclInProgress; it is done when the communicator's
    // asynchronous state leaves ncclInProgress.
    void settle(const char *op, Clock::time_point deadline)
    {
        auto pause = std::chrono::microseconds(20);
        for (;;) {
            ncclResult_t state = ncclSuccess;
            ncclResult_t r = api_.ncclCommGetAsyncError(comm_, &state);
            if (r != ncclSuccess) failed_async(op, r);
            if (state == ncclSuccess) return;
            if (state != ncclInProgress) failed_async(op, state);
            if (Clock::now() > deadline) timed_out(op);
            std::this_thread::sleep_for(pause);
            pause = std::min(pause * 2, std::chrono::microseconds(2000));
        }
    }

    std::string describe(ncclResult_t r) const
    {
        std::string last = api_.ncclGetLastError(comm_) ? api_.ncclGetLastError(comm_) : "";
        return std::string(api_.ncclGetErrorString(r)) + (last.empty() ? "" : ": " + last);
    }

    [[noreturn]] void failed_async(const char *op, ncclResult_t r)
    {
        abort_comm();
        failed(op, status_of(r), describe(r) + (r == ncclRemoteError ? " (a peer process failed)" : ""));
    }

    [[noreturn]] void timed_out(const char *op)
    {
        abort_comm();
        failed(op, ACCEL_ERR_DEADLINE_EXCEEDED,
               "did not complete within the timeout of " + std::to_string(shared_->timeout.count() / 1000.0) +
                   " s; the NCCL communicator was aborted (a peer may have stopped or not called the same collective)");
    }

    void abort_comm()
    {
        if (aborted_) return;
        aborted_ = true;
        api_.ncclCommAbort(comm_); // ends the kernels waiting for peers, so nothing hangs
    }

    // Poisons the shared state with the first cause and throws.
    [[noreturn]] void failed(const char *op, accel_status_t code, const std::string &what)
    {
        std::string full = std::string("nccl ") + op + " failed on rank " + std::to_string(global_[rank_]) + " of " +
                           std::to_string(global_.size()) + ": " + what;
        poison_with(full);
        fail(code, full);
    }

    void poison_with(const std::string &cause)
    {
        std::lock_guard<std::mutex> l(shared_->m);
        if (shared_->poison.empty()) shared_->poison = cause;
    }

    bool poisoned()
    {
        std::lock_guard<std::mutex> l(shared_->m);
        return !shared_->poison.empty();
    }

    void check_poison(const char *op)
    {
        std::lock_guard<std::mutex> l(shared_->m);
        if (!shared_->poison.empty())
            fail(ACCEL_ERR_ABORTED, std::string("nccl ") + op + ": communication already failed: " + shared_->poison);
    }

    void check_rank(int32_t r, const char *what) const
    {
        if (r < 0 || r >= size())
            fail(ACCEL_ERR_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) + " is not in 0.." +
                                             std::to_string(size() - 1));
    }

    void check_device(const at::Tensor &t, const char *op) const
    {
        if (t.is_cuda() && t.device().index() != shared_->device)
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("nccl ") + op + ": the tensor is on cuda:" +
                                                 std::to_string(t.device().index()) + ", this process uses cuda:" +
                                                 std::to_string(shared_->device));
        if (!t.is_cuda() && !t.is_cpu())
            fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("nccl ") + op + ": expected a CPU or CUDA tensor, got one on " +
                                                 t.device().str());
    }

    static void require_contiguous(const at::Tensor &t, const char *op)
    {
        if (!t.is_contiguous()) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(op) + ": the tensor must be contiguous");
    }

    const NcclApi &api_;
    std::shared_ptr<Shared> shared_;
    ncclComm_t comm_;
    cudaStream_t stream_;
    std::vector<int32_t> global_;
    int32_t rank_;
    bool aborted_ = false;
    std::vector<std::pair<void *, size_t>> lent_; // pinned buffers in use by pending work (under shared_->m)
};

void NcclWork::wait()
{
    if (waited_) return;
    owner_->wait_event(event_, op_);
    waited_ = true;
    done_at_ = now_seconds(); // when wait() saw the event complete (the backend has no completion callback)
    for (auto &c : copies) std::memcpy(c.target.data_ptr(), c.host, c.bytes);
    for (void *p : pinned) owner_->return_pinned(p);
    pinned.clear();
    if (avg_target.defined()) avg_target.div_(divisor, "floor");
}

NcclWork::~NcclWork()
{
    // Dropped without wait(): wait here so the pinned buffers are not reused while copies are pending.
    // After a failure (or a launch that failed half-way) they are leaked instead: the stream may
    // still reference them.
    if (launched && !waited_) {
        try {
            wait();
        } catch (const std::exception &) {
        }
    }
    owner_->api().cudaEventDestroy(event_);
}

} // namespace

bool nccl_compiled() { return true; }

std::shared_ptr<Communicator> make_nccl_communicator(const config::AcceleratorConfig &c)
{
    const NcclApi &api = nccl_api(); // UNIMPLEMENTED naming the library that is missing
    const auto &t = c.topology;
    int count = 0;
    cudaError_t e = api.cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0)
        fail(ACCEL_ERR_UNAVAILABLE, std::string(kBackendKey) + ": no CUDA device: cudaGetDeviceCount returned " +
                                        (e != cudaSuccess ? cuda_error_text(api, e) : std::string("0 devices")) +
                                        " on rank " + std::to_string(t.rank) + "; use \"gloo\" on machines without GPUs");
    // NCCL refuses two ranks on one GPU, with an "invalid usage" that does not say why.
    if (t.local_world_size > count)
        fail(ACCEL_ERR_FAILED_PRECONDITION,
             std::string(kBackendKey) + ": " + std::to_string(t.local_world_size) + " processes on this machine and " +
                 std::to_string(count) + " GPU(s) visible to them (rank " + std::to_string(t.rank) +
                 "): NCCL needs a GPU of its own for every process; start at most " + std::to_string(count) +
                 " per machine (see CUDA_VISIBLE_DEVICES / gpu_ids), or use \"gloo\"");
    auto shared = std::make_shared<Shared>();
    shared->api = &api;
    shared->device = t.local_rank % count; // one GPU per local process, as torchrun assigns them
    shared->timeout = init_timeout(c);
    shared->store = open_store(rendezvous_of(c), c, "nccl");
    std::vector<int32_t> ranks;
    for (int32_t i = 0; i < t.world_size; ++i) ranks.push_back(i);
    return NcclCommunicator::create(api, shared, "accel/nccl/world/", std::move(ranks), t.rank);
}

#else // !ACCEL_WITH_NCCL

bool nccl_compiled() { return false; }

std::shared_ptr<Communicator> make_nccl_communicator(const config::AcceleratorConfig &)
{
    fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: \"nccl\" was not compiled into this "
                                  "accel (configure with -DACCEL_NCCL=ON where nccl.h and the CUDA runtime are "
                                  "installed); use \"gloo\" or \"mpi\"");
}

#endif

} // namespace accel::distributed
