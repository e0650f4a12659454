#include "config/env.hpp"

#include "common/error.hpp"

#include <cstdlib>
#include <limits>

namespace accel::config {

std::optional<std::string> env_string(const char *name)
{
    const char *v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

namespace {
// The first of `names` that is set, parsed as a non-negative int; `def` if none is.
int32_t env_int(std::initializer_list<const char *> names, int32_t def)
{
    for (const char *name : names) {
        auto v = env_string(name);
        if (!v) continue;
        char *end = nullptr;
        long long x = std::strtoll(v->c_str(), &end, 10);
        if (end == v->c_str() || *end != '\0' || x < 0 || x > std::numeric_limits<int32_t>::max())
            fail(ACCEL_ERR_INVALID_ARGUMENT,
                 std::string("environment variable ") + name + ": expected a non-negative integer, got \"" + *v + "\"");
        return static_cast<int32_t>(x);
    }
    return def;
}
} // namespace

ProcessTopology topology_from_env()
{
    // torchrun / accel launch first, then Open MPI's mpirun, then Slurm.
    ProcessTopology t;
    t.rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, 0);
    t.world_size = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1);
    t.local_rank = env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, 0);
    t.local_world_size = env_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}, t.world_size);
    if (t.world_size < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "environment: WORLD_SIZE must be >= 1");
    if (t.rank >= t.world_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "environment: RANK " + std::to_string(t.rank) + " is not below WORLD_SIZE " +
                                             std::to_string(t.world_size));
    return t;
}

} // namespace accel::config
