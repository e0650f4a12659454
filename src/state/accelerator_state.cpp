#include "state/accelerator_state.hpp"

#include "distributed/device_mesh.hpp"

namespace accel {

// Without a mesh (a state no accelerator finished building): every process is its own data shard.
int32_t AcceleratorState::data_parallel_size() const
{
    return mesh ? mesh->size(distributed::MeshDim::Dp) : num_processes();
}

int32_t AcceleratorState::data_parallel_rank() const
{
    return mesh ? mesh->rank_in(distributed::MeshDim::Dp) : process_index();
}

} // namespace accel
