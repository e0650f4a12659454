#include "distributed/communicator.hpp"

#include "common/error.hpp"
#include "distributed/out_of_memory_notice.hpp"

#include <torch/cuda.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace accel::distributed {

double now_seconds()
{
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

std::chrono::milliseconds init_timeout(const config::AcceleratorConfig &c)
{
    return std::chrono::milliseconds(static_cast<int64_t>(c.init_process_group.timeout * 1000.0));
}

const char *reduce_op_name(ReduceOp op)
{
    switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
    }
    return "?";
}

namespace {

class DoneWork : public Work {
public:
    void wait() override {}
    double completed_at() const override { return at_; }

private:
    double at_ = now_seconds();
};

// The default receive without waiting: the blocking receive, run by wait().
class DeferredRecvWork : public Work {
public:
    DeferredRecvWork(Communicator &owner, at::Tensor tensor, int32_t src, int32_t tag)
        : owner_(owner), tensor_(std::move(tensor)), src_(src), tag_(tag) {}
    void wait() override
    {
        if (at_ != 0.0) return;
        owner_.recv(tensor_, src_, tag_);
        at_ = now_seconds();
    }
    double completed_at() const override { return at_; }

private:
    Communicator &owner_; // the caller keeps its communicator for as long as it waits on its works
    at::Tensor tensor_;
    int32_t src_, tag_;
    double at_ = 0.0;
};

// A world of one: every collective is the identity.
class SingleCommunicator : public Communicator, public std::enable_shared_from_this<SingleCommunicator> {
public:
    const char *backend() const override { return "single"; }
    int32_t rank() const override { return 0; }
    int32_t size() const override { return 1; }
    std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(0); }
    std::shared_ptr<Work> allreduce_async(at::Tensor &, ReduceOp) override { return std::make_shared<DoneWork>(); }
    std::vector<at::Tensor> allgather(const at::Tensor &t) override { return {t.clone()}; }
    void broadcast(at::Tensor &, int32_t root) override { check_rank(root, "root"); }
    at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp) override { return input.clone(); }
    void send(const at::Tensor &, int32_t dst, int32_t) override { check_rank(dst, "dst"); no_peer("send"); }
    void recv(at::Tensor &, int32_t src, int32_t) override { check_rank(src, "src"); no_peer("recv"); }
    void barrier() override {}
    std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) override
    {
        if (ranks.size() != 1 || ranks[0] != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "ranks: a world of one process only has rank 0");
        return shared_from_this();
    }

private:
    static void check_rank(int32_t r, const char *what)
    {
        if (r != 0)
            fail(ACCEL_ERR_OUT_OF_RANGE, std::string(what) + ": rank " + std::to_string(r) +
                                             " does not exist in a world of one process");
    }
    [[noreturn]] static void no_peer(const char *op)
    {
        fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(op) + ": a process cannot send to or receive from itself");
    }
};

std::mutex g_mutex;
std::shared_ptr<Communicator> *g_comm = nullptr; // leaked on purpose: lives until exit
std::string g_signature;

// Under accel launch, its watchdog learns this job's timeout: it ends the job when a process stays stopped longer
// (src/cli/launch_watchdog.hpp). Best effort: the file is written whole (renamed into place) or not at all.
void tell_launcher(const config::AcceleratorConfig &c)
{
    const char *dir = std::getenv("ACCEL_LAUNCH_STATE_DIR");
    if (dir == nullptr || *dir == '\0') return;
    const std::string path = std::string(dir) + "/timeout." + std::to_string(c.topology.rank);
    const std::string tmp = path + ".tmp";
    FILE *f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr) return;
    const bool ok = std::fprintf(f, "%.3f\n", c.init_process_group.timeout) > 0;
    if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path.c_str());
    else std::remove(tmp.c_str());
}

std::string signature_of(const config::AcceleratorConfig &c, const std::string &backend)
{
    const auto &t = c.topology;
    if (backend == "single") return "backend single (one process)";
    return "backend " + backend + ", rank " + std::to_string(t.rank) + " of " + std::to_string(t.world_size) +
           ", init_method " + (c.init_process_group.init_method.empty() ? "env://" : c.init_process_group.init_method) +
           ", timeout " + std::to_string(static_cast<int64_t>(c.init_process_group.timeout)) + " s";
}

} // namespace

std::shared_ptr<Work> Communicator::send_async(const at::Tensor &tensor, int32_t dst, int32_t tag)
{
    send(tensor, dst, tag);
    return std::make_shared<DoneWork>();
}

std::shared_ptr<Work> Communicator::recv_async(at::Tensor &tensor, int32_t src, int32_t tag)
{
    return std::make_shared<DeferredRecvWork>(*this, tensor, src, tag);
}

std::vector<std::string> compiled_backends()
{
    std::vector<std::string> out{"single"};
    if (gloo_compiled()) out.push_back("gloo");
#ifdef ACCEL_WITH_MPI
    out.push_back("mpi");
#endif
    if (nccl_compiled()) out.push_back("nccl");
    return out;
}

std::shared_ptr<Communicator> make_single_communicator() { return std::make_shared<SingleCommunicator>(); }

std::string choose_backend(const config::AcceleratorConfig &c)
{
    const std::string &asked = c.init_process_group.backend;
    if (c.topology.world_size <= 1) return asked.empty() ? "single" : (asked == "nccl" ? "nccl" : "single");
    if (!asked.empty()) return asked;
    // Accelerate: nccl where the processes train on GPUs; on CPU mpi when started by mpirun, else gloo
    // (torchrun-style rendezvous); a build without Gloo (pip's LibTorch) but with NCCL: nccl.
    if (!c.cpu && nccl_compiled() && torch::cuda::is_available()) return "nccl";
    if (c.topology.launcher == "mpi") return "mpi";
    return !gloo_compiled() && nccl_compiled() ? "nccl" : "gloo";
}

std::shared_ptr<Communicator> process_communicator(const config::AcceleratorConfig &config)
{
    std::string backend = choose_backend(config);
    std::string sig = signature_of(config, backend);
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_comm != nullptr) {
        if (sig != g_signature)
            fail(ACCEL_ERR_FAILED_PRECONDITION,
                 "one distributed configuration per process: this process already communicates with " + g_signature +
                     "; this accelerator asks for " + sig);
        return *g_comm;
    }
    std::shared_ptr<Communicator> comm;
    if (backend == "single") comm = make_single_communicator();
    else if (backend == "gloo") comm = make_gloo_communicator(config);
    else if (backend == "mpi") comm = make_mpi_communicator(config);
    else if (backend == "nccl") comm = make_nccl_communicator(config);
    else fail(ACCEL_ERR_INVALID_ARGUMENT, "kwargs_handlers.init_process_group.backend: unknown backend \"" + backend + "\"");
    g_comm = new std::shared_ptr<Communicator>(comm);
    g_signature = sig;
    if (comm->size() > 1) tell_launcher(config);
    return comm;
}

void notice_out_of_memory(const std::string &message) noexcept
{
    try {
        std::shared_ptr<Communicator> comm;
        {
            std::unique_lock<std::mutex> lock(g_mutex, std::try_to_lock); // never waits for a rendezvous
            if (!lock.owns_lock() || g_comm == nullptr) return;
            comm = *g_comm;
        }
        comm->note_out_of_memory(message);
    } catch (...) {
        // best effort: the caller's own status already says it
    }
}

} // namespace accel::distributed
