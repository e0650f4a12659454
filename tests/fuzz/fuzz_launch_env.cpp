// `accel launch`'s cluster environment (cli/launch_env.cpp: torchrun's PET_* variables, PyTorchJob v1's RANK /
// WORLD_SIZE / MASTER_*, Slurm's SLURM_* and its hostlist, --nnodes' "N" / "MIN:MAX") and the worker side's
// topology (config/env.cpp's topology_from_env: RANK, WORLD_SIZE, LOCAL_*, MASTER_*, TORCHELASTIC_*, the MPI
// launchers' and Slurm's variables). The input is lines NAME=VALUE. Values are either used within their ranges or
// refused with an accel::Error (INVALID_ARGUMENT / UNIMPLEMENTED) that names something; nothing else escapes.
#include "cli/launch_env.hpp"
#include "common/error.hpp"
#include "config/env.hpp"
#include "fuzz_common.hpp"

#include <cstdlib>
#include <map>
#include <sstream>

namespace {

// Only the variables these parsers read are set from an input (never the sanitizer's or the loader's own).
bool managed(const std::string &name)
{
    for (const char *prefix : {"PET_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_", "SLURM_",
                               "OMPI_COMM_WORLD_", "PMI_", "MV2_COMM_WORLD_", "MPI_LOCAL", "TORCHELASTIC_"})
        if (name.rfind(prefix, 0) == 0) return true;
    return false;
}

// Runs body(): true when it returned; a refusal must be an accel::Error of the expected kinds, with a message.
template <class Body>
bool accepted(Body &&body)
{
    try {
        body();
        return true;
    } catch (const accel::Error &e) {
        if (e.code() != ACCEL_ERR_INVALID_ARGUMENT && e.code() != ACCEL_ERR_UNIMPLEMENTED &&
            e.code() != ACCEL_ERR_FAILED_PRECONDITION) // PET_NPROC_PER_NODE=gpu without GPUs
            accel::fuzz::finding(std::string("unexpected status ") + std::to_string(e.code()) + ": " + e.what());
        if (std::string(e.what()).empty()) accel::fuzz::finding("a refusal without a message");
        return false;
    }
}

void in_range(const std::optional<int> &v, int min, int max, const char *what)
{
    if (v && (*v < min || *v > max)) accel::fuzz::finding(std::string(what) + " out of range: " + std::to_string(*v));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    using namespace accel;
    const std::string text = fuzz::text_of(data, size);
    std::map<std::string, std::string> vars;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
        const size_t eq = line.find('=');
        if (eq == std::string::npos || eq == 0) continue;
        const std::string name = line.substr(0, eq);
        if (managed(name) && name.find('\0') == std::string::npos) vars[name] = line.substr(eq + 1);
    }
    const cli::EnvLookup lookup = [&](const char *name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end() || it->second.empty()) return std::nullopt;
        return it->second;
    };

    // The launcher: each flag within its range when accepted.
    // "cpu" / "gpu" / "auto" count a machine of 3 CPUs and 0 or 2 GPUs (the input's length decides).
    const cli::LocalDevices devices{[] { return 3; }, [size] { return size % 2 == 0 ? 2 : 0; }};
    cli::ClusterFlags flags;
    if (accepted([&] { cli::cluster_env_defaults(flags, lookup, devices); })) {
        in_range(flags.num_machines, 1, 4096, "num_machines");
        in_range(flags.machine_rank, 0, 4095, "machine_rank");
        in_range(flags.main_process_port, 1, 65535, "main_process_port");
        in_range(flags.max_restarts, 0, 1000000, "max_restarts");
        in_range(flags.num_processes, 1, 4096 * 4096, "num_processes");
        // PET_NNODES=MIN:MAX: a true range, and no variable then places the machine (ranks follow arrival).
        if (flags.nnodes_range && (flags.nnodes_range->first >= flags.nnodes_range->second ||
                                   flags.nnodes_range->first < 1 || flags.nnodes_range->second > 4096 ||
                                   flags.num_machines || flags.machine_rank))
            fuzz::finding("PET_NNODES range accepted with a fixed place or out of order");
    }
    for (const auto &var : vars) {
        const std::string &name = var.first, &value = var.second; // (C++17 lambdas cannot capture a binding)
        std::pair<int, int> range{0, 0};
        if (accepted([&] { range = cli::parse_nnodes(value, name); }) &&
            (range.first < 1 || range.first > range.second || range.second > 4096))
            fuzz::finding("nnodes accepted out of order: " + value);
        double join = 1.0, last_call = 1.0;
        if (accepted([&] { cli::parse_rdzv_conf(value, join, last_call); }) &&
            !(join >= 0.0 && join <= 86400.0 && last_call >= 0.0 && last_call <= 86400.0))
            fuzz::finding("--rdzv_conf accepted a timeout out of range: " + value);
        if (cli::first_slurm_host(value).size() > value.size()) fuzz::finding("a Slurm host longer than its list");
        int nproc = 0;
        if (accepted([&] { nproc = cli::nproc_per_node(value, name, devices); }) && (nproc < 1 || nproc > 4096))
            fuzz::finding("processes per node accepted out of range: " + std::to_string(nproc));
    }

    // The worker: topology_from_env reads the process environment.
    for (const auto &[name, value] : vars)
        if (value.find('\0') == std::string::npos) setenv(name.c_str(), value.c_str(), 1);
    config::ProcessTopology t;
    if (accepted([&] { t = config::topology_from_env(); })) {
        if (t.world_size < 1 || t.rank < 0 || t.rank >= t.world_size || t.local_rank < 0)
            fuzz::finding("a topology accepted with rank " + std::to_string(t.rank) + " of " + std::to_string(t.world_size));
        if (t.master_port < 0 || t.master_port > 65535) fuzz::finding("MASTER_PORT out of range");
    }
    for (const auto &[name, value] : vars) unsetenv(name.c_str());
    return 0;
}
