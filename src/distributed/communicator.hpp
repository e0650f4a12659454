// Communicator: the collectives accel needs, behind one interface with gloo, mpi, nccl and single
// backends (architecture.md, "communication"). Tensors are CPU tensors; every operation is in place
// unless it returns something. Every operation has a timeout: a peer that dies or stops answering
// makes the others fail with ACCEL_ERR_UNAVAILABLE or ACCEL_ERR_DEADLINE_EXCEEDED, naming the rank
// where the backend can tell. After a failure the communicator is poisoned: later operations fail
// with ACCEL_ERR_ABORTED repeating the first cause.
#pragma once

#include "config/accelerator_config.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace accel::distributed {

enum class ReduceOp { Sum, Avg, Max, Min };

// An operation in flight. wait() throws accel::Error on failure or timeout.
class Work {
public:
    virtual ~Work() = default;
    virtual void wait() = 0;
    // Steady-clock seconds when the backend finished the operation (0 before wait() returned).
    virtual double completed_at() const = 0;
};

class Communicator {
public:
    virtual ~Communicator() = default;

    virtual const char *backend() const = 0;
    virtual int32_t rank() const = 0;
    virtual int32_t size() const = 0;
    virtual std::chrono::milliseconds timeout() const = 0;

    // Element-wise reduction over all ranks, in place. The asynchronous form is what DDP's buckets use.
    virtual std::shared_ptr<Work> allreduce_async(at::Tensor &tensor, ReduceOp op) = 0;
    void allreduce(at::Tensor &tensor, ReduceOp op) { allreduce_async(tensor, op)->wait(); }
    // Every rank's tensor (all the same shape), in rank order.
    virtual std::vector<at::Tensor> allgather(const at::Tensor &tensor) = 0;
    // Rank `root`'s tensor into every rank's tensor (same shape and dtype everywhere).
    virtual void broadcast(at::Tensor &tensor, int32_t root) = 0;
    // `input` holds size() equal chunks along dim 0; rank r receives the reduction of everyone's chunk r.
    virtual at::Tensor reduce_scatter(const at::Tensor &input, ReduceOp op) = 0;
    virtual void send(const at::Tensor &tensor, int32_t dst, int32_t tag) = 0;
    virtual void recv(at::Tensor &tensor, int32_t src, int32_t tag) = 0;
    // Point to point without waiting (the pipeline's stage boundaries): posted now, finished by the Work's wait(),
    // which must come before a received tensor is read; the Work holds the tensor until then. A Work dropped
    // unwaited is given up (its transfer may never happen). Gloo and MPI post both; backends without them (the
    // default: NCCL, the single and thread ones) send here, blocking, and receive in wait(): the events happen in the
    // order the blocking calls would, so a caller may post its receives early on every backend.
    virtual std::shared_ptr<Work> send_async(const at::Tensor &tensor, int32_t dst, int32_t tag);
    virtual std::shared_ptr<Work> recv_async(at::Tensor &tensor, int32_t src, int32_t tag);
    // Whether send_async waits for its receiver before returning (the default form does: the blocking send). A
    // caller may post a send before its own receive (a ring's hop started under computation) only where it does not;
    // elsewhere it keeps an order in which every blocking send meets a receive already under way.
    virtual bool send_async_blocks() const { return true; }
    virtual void barrier() = 0;
    // A communicator over `ranks` (sorted, unique, of this communicator). Collective: every rank of
    // this communicator calls it with the same list; ranks outside the list get nullptr.
    virtual std::shared_ptr<Communicator> new_group(const std::vector<int32_t> &ranks) = 0;
    // This process ran out of memory outside a collective (out_of_memory_notice.hpp): backends with heartbeats tell
    // the peers; the others ignore it.
    virtual void note_out_of_memory(const std::string &) {}
};

// Steady-clock seconds (for Work::completed_at and statistics).
double now_seconds();

// kwargs_handlers.init_process_group.timeout (seconds) as the duration every backend waits at most.
std::chrono::milliseconds init_timeout(const config::AcceleratorConfig &c);

// The communicator of this process: created by the first accelerator from its configuration
// (kwargs_handlers.init_process_group and the launcher's environment), kept until the process exits.
// Later calls must describe the same distributed configuration, else ACCEL_ERR_FAILED_PRECONDITION.
std::shared_ptr<Communicator> process_communicator(const config::AcceleratorConfig &config);
// The backend process_communicator() would pick: "single", "gloo", "mpi" or "nccl".
std::string choose_backend(const config::AcceleratorConfig &config);

// Backend factories (each in its own .cpp; unavailable ones throw ACCEL_ERR_UNIMPLEMENTED saying why).
std::shared_ptr<Communicator> make_single_communicator();
std::shared_ptr<Communicator> make_gloo_communicator(const config::AcceleratorConfig &config);
std::shared_ptr<Communicator> make_mpi_communicator(const config::AcceleratorConfig &config);
std::shared_ptr<Communicator> make_nccl_communicator(const config::AcceleratorConfig &config);

const char *reduce_op_name(ReduceOp op);

// Whether the NCCL backend was compiled in (CMake option ACCEL_NCCL; ACCEL_WITH_NCCL is defined for the
// nccl_*.cpp files only). It may still be unusable at run time.
bool nccl_compiled();
// Whether the gloo backend was compiled in (its LibTorch's include folders hold Gloo's headers).
bool gloo_compiled();
// The backends this build can create, for accel_build_info_json: "single", then "gloo", "mpi" and
// "nccl" when compiled in.
std::vector<std::string> compiled_backends();

} // namespace accel::distributed
