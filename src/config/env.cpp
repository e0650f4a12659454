#include "config/env.hpp"

#include "common/error.hpp"

#include <cctype>
#include <cstdlib>
#include <limits>

namespace accel::config {

std::optional<std::string> env_string(const char *name)
{
    const char *v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

std::optional<int> torch_log_level_from_env()
{
    auto v = env_string("TORCH_CPP_LOG_LEVEL");
    if (!v) return std::nullopt;
    std::string u = *v;
    for (char &ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    const char *names[] = {"INFO", "WARNING", "ERROR", "FATAL"};
    for (int i = 0; i < 4; ++i)
        if (u == names[i] || u == std::to_string(i)) return i;
    fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable TORCH_CPP_LOG_LEVEL: expected INFO, WARNING, ERROR or FATAL "
                                     "(or 0-3), got \"" + *v + "\"");
}

bool glog_level_in_env()
{
    return env_string("GLOG_minloglevel").has_value();
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
    // torchrun / accel launch first, then MPI launchers (Open MPI, MPICH/Intel PMI, MVAPICH), then Slurm.
    ProcessTopology t;
    t.rank = env_int({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}, 0);
    t.world_size = env_int({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "SLURM_NTASKS"}, 1);
    t.local_rank = env_int({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK",
                            "SLURM_LOCALID"},
                           0);
    t.local_world_size = env_int({"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                  "MV2_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"},
                                 t.world_size);
    if (t.world_size < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "environment: WORLD_SIZE must be >= 1");
    if (t.rank >= t.world_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "environment: RANK " + std::to_string(t.rank) + " is not below WORLD_SIZE " +
                                             std::to_string(t.world_size));
    // A local rank counts the processes of one machine, never more than the job's (and local_rank + 1 below
    // cannot overflow then).
    if (t.local_rank >= t.world_size)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "environment: LOCAL_RANK " + std::to_string(t.local_rank) +
                                             " is not below WORLD_SIZE " + std::to_string(t.world_size));
    if (t.local_rank >= t.local_world_size && t.local_world_size > 0)
        t.local_world_size = t.local_rank + 1; // a launcher that exports no local size
    if (env_string("WORLD_SIZE") || env_string("RANK")) t.launcher = "torchrun";
    else if (env_string("OMPI_COMM_WORLD_SIZE") || env_string("PMI_SIZE") || env_string("MV2_COMM_WORLD_SIZE"))
        t.launcher = "mpi";
    else if (env_string("SLURM_NTASKS")) t.launcher = "slurm";
    if (auto a = env_string("MASTER_ADDR")) t.master_addr = *a;
    t.master_port = env_int({"MASTER_PORT"}, 29500);
    if (t.master_port > 65535)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "environment variable MASTER_PORT: expected a port in 0..65535, got " +
                                             std::to_string(t.master_port));
    // torch's own test is == "True" (torch/distributed/rendezvous.py); torchrun writes exactly that.
    t.agent_store = env_string("TORCHELASTIC_USE_AGENT_STORE").value_or("") == "True";
    t.restart_count = std::to_string(env_int({"TORCHELASTIC_RESTART_COUNT"}, 0));
    return t;
}

} // namespace accel::config
