// parallelism_config: Accelerate 1.10+'s ParallelismConfig (dp_replicate_size, dp_shard_size, tp_size,
// cp_size, sp_size and their handlers), from the accelerator JSON or, as Accelerate creates one when
// ACCELERATE_USE_PARALLELISM_CONFIG is "true", from the PARALLELISM_CONFIG_* environment. It sizes the
// device mesh (src/distributed/device_mesh.hpp; docs/guides/parallelism.md).
#pragma once

#include <cstdint>
#include <string>

namespace accel::config {

struct ParallelismConfig {
    bool given = false; // a parallelism_config object, or ACCELERATE_USE_PARALLELISM_CONFIG=true
    int32_t dp_replicate_size = 1;
    int32_t dp_shard_size = 1;
    int32_t tp_size = 1;
    int32_t cp_size = 1;
    int32_t sp_size = 1;
    std::string cp_backend = "torch";     // PARALLELISM_CONFIG_CP_BACKEND
    std::string sp_backend = "deepspeed"; // PARALLELISM_CONFIG_SP_BACKEND
    std::string cp_comm_strategy = "allgather"; // cp_handler.cp_comm_strategy
};

} // namespace accel::config
