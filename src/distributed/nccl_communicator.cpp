// NCCL: GPU collectives through c10d's ProcessGroupNCCL. Only a CUDA LibTorch with NCCL can build it
// (ACCEL_WITH_NCCL, set by CMake when Torch reports CUDA and c10d was built with NCCL); this CPU build
// reports why it is missing. The backend itself is not written yet: it has never been compiled here.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

namespace accel::distributed {

std::shared_ptr<Communicator> make_nccl_communicator(const config::AcceleratorConfig &)
{
#ifdef ACCEL_WITH_NCCL
    fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: \"nccl\" is not yet supported by accel "
                                  "(the CUDA build of the NCCL backend has not been written or tested); use \"gloo\"");
#else
    fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.init_process_group.backend: \"nccl\" needs a CUDA LibTorch built "
                                  "with NCCL, and this accel was built against a CPU-only LibTorch; use \"gloo\" or "
                                  "\"mpi\"");
#endif
}

} // namespace accel::distributed
