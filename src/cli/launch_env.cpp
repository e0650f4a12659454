#include "cli/launch_env.hpp"

#include "cli/launch_config.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <sys/random.h>
#include <vector>

namespace accel::cli {

std::optional<std::string> process_env(const char *name)
{
    const char *v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

int checked_int(const std::string &what, const std::string &v, int min, int max)
{
    const std::optional<int> x = parse_int_in(v, min, max);
    if (!x)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": expected an integer in " + std::to_string(min) + ".." +
                                             std::to_string(max) + ", got \"" + v + "\"");
    return *x;
}

std::pair<int, int> parse_nnodes(const std::string &text, const std::string &what)
{
    const size_t colon = text.find(':');
    if (colon != std::string::npos && text.find(':', colon + 1) != std::string::npos)
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + "=" + text + ": expected a number of nodes or MIN:MAX");
    const std::string min_text = text.substr(0, colon);
    const int min = checked_int(what + " (MIN)", min_text, 1, 4096);
    const int max = colon == std::string::npos ? min : checked_int(what + " (MAX)", text.substr(colon + 1), 1, 4096);
    if (min > max) fail(ACCEL_ERR_INVALID_ARGUMENT, what + "=" + text + ": MIN is above MAX");
    return {min, max};
}

void parse_rdzv_conf(const std::string &text, double &join_timeout, double &last_call_timeout, const std::string &what)
{
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        const size_t eq = item.find('=');
        const std::string k = item.substr(0, eq), v = eq == std::string::npos ? "" : item.substr(eq + 1);
        if (k != "join_timeout" && k != "last_call_timeout")
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": unknown key \"" + k +
                                                 "\" (accel reads join_timeout and last_call_timeout)");
        char *end = nullptr;
        const double x = std::strtod(v.c_str(), &end);
        if (v.empty() || end == nullptr || *end != '\0' || !(x >= 0.0 && x <= 86400.0))
            fail(ACCEL_ERR_INVALID_ARGUMENT, what + " " + k + "=" + v + ": expected seconds in [0, 86400]");
        (k == "join_timeout" ? join_timeout : last_call_timeout) = x;
    }
}

int nproc_per_node(const std::string &text, const std::string &what, const LocalDevices &devices)
{
    const auto gpus = [&] { return devices.gpus ? std::max(0, devices.gpus()) : 0; };
    const auto cpus = [&] { return devices.cpus ? std::clamp(devices.cpus(), 1, 4096) : 1; };
    if (text == "cpu") return cpus();
    if (text == "auto") return gpus() > 0 ? std::min(gpus(), 4096) : cpus();
    if (text == "gpu") {
        if (gpus() == 0)
            fail(ACCEL_ERR_FAILED_PRECONDITION, what + "=gpu: no GPU is visible on this machine (torchrun refuses it "
                                                       "alike); give a number, or cpu / auto");
        return std::min(gpus(), 4096);
    }
    if (!parse_int_in(text, 1, 4096))
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": expected a number of processes in 1..4096, cpu, gpu or auto, "
                                                "got \"" + text + "\"");
    return *parse_int_in(text, 1, 4096);
}

int visible_gpus(int gpus, const std::optional<std::string> &visible)
{
    return visible ? static_cast<int>(visible_gpu_entries(gpus, *visible).size()) : gpus;
}

std::vector<std::string> visible_gpu_entries(int gpus, const std::string &visible)
{
    const std::string prefix = visible.rfind("GPU-", 0) == 0 ? "GPU-" : visible.rfind("MIG-", 0) == 0 ? "MIG-" : "";
    std::vector<std::string> seen;
    std::stringstream in(visible);
    for (std::string item; std::getline(in, item, ',');) {
        const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
        item = b == std::string::npos ? "" : item.substr(b, e - b + 1);
        const bool valid = prefix.empty() ? parse_int_in(item, 0, gpus - 1).has_value()
                                          : item.size() > prefix.size() && item.rfind(prefix, 0) == 0;
        if (!valid) break;
        if (std::find(seen.begin(), seen.end(), item) != seen.end()) return {};
        seen.push_back(item);
    }
    seen.resize(std::min(seen.size(), static_cast<size_t>(std::max(gpus, 0))));
    return seen;
}

namespace {

// torchrun's PET_* variables (each torchrun flag as PET_<FLAG>: how Kubeflow Trainer v2 and PyTorchJob with
// nprocPerNode configure the launcher of each node); and PyTorchJob v1's own form - RANK is the node's rank and
// WORLD_SIZE counts every process (training-operator >= 1.7), MASTER_ADDR / MASTER_PORT the rendezvous - when
// PET_NPROC_PER_NODE says how many processes a node starts. Only with PET_NPROC_PER_NODE: a RANK inherited from an
// outer launcher otherwise means nothing to this one.
// torchrun's rendezvous flags as PET_RDZV_*: the meeting point (PET_RDZV_ENDPOINT "host[:port]", "[v6]:port"),
// its id, its timeouts; the backend only checked (accel's launchers meet at a store of their own, c10d's kind).
void rdzv_env_defaults(ClusterFlags &o, const EnvLookup &env)
{
    if (auto v = env("PET_RDZV_BACKEND"); v && *v != "static" && *v != "c10d") {
        if (*v == "etcd" || *v == "etcd-v2")
            fail(ACCEL_ERR_UNIMPLEMENTED, "PET_RDZV_BACKEND=" + *v + ": accel's launchers meet at a store of their own "
                                          "(c10d's kind), not in etcd; use c10d or static (see docs/concepts/limitations.md)");
        fail(ACCEL_ERR_INVALID_ARGUMENT, "PET_RDZV_BACKEND=" + *v + ": expected static, c10d (or torchrun's etcd)");
    }
    if (!o.rdzv_id)
        if (auto v = env("PET_RDZV_ID")) o.rdzv_id = *v;
    if (!o.rdzv_conf)
        if (auto v = env("PET_RDZV_CONF")) {
            // Below 0: the key is absent (parse_rdzv_conf accepts [0, 86400]).
            double join = -1, last_call = -1;
            parse_rdzv_conf(*v, join, last_call, "PET_RDZV_CONF");
            o.rdzv_conf = *v;
            if (join >= 0) o.join_timeout = join;
            if (last_call >= 0) o.last_call_timeout = last_call;
        }
    const std::optional<std::string> endpoint = env("PET_RDZV_ENDPOINT");
    if (!endpoint || (o.main_process_ip && o.main_process_port)) return;
    // "[::1]:29400", "host:29400", "host": the port after the last colon outside brackets.
    std::string host = *endpoint;
    std::optional<std::string> port;
    const size_t close = host.rfind(']'), colon = host.rfind(':');
    if (!host.empty() && host[0] == '[') {
        if (close == std::string::npos || (close + 1 < host.size() && host[close + 1] != ':'))
            fail(ACCEL_ERR_INVALID_ARGUMENT, "PET_RDZV_ENDPOINT=" + *endpoint + ": expected host[:port] or [v6]:port");
        if (close + 1 < host.size()) port = host.substr(close + 2);
        host = host.substr(1, close - 1);
    } else if (colon != std::string::npos && host.find(':') == colon) {
        port = host.substr(colon + 1);
        host = host.substr(0, colon);
    }
    if (host.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "PET_RDZV_ENDPOINT=" + *endpoint + ": no host");
    if (!o.main_process_ip) o.main_process_ip = host;
    if (!o.main_process_port && port) o.main_process_port = checked_int("PET_RDZV_ENDPOINT's port", *port, 1, 65535);
}

void torchrun_env_defaults(ClusterFlags &o, const EnvLookup &env, const LocalDevices &devices)
{
    const std::optional<std::string> nproc_text = env("PET_NPROC_PER_NODE");
    if (!o.num_machines && !o.nnodes_range)
        if (auto v = env("PET_NNODES")) { // torchrun's elastic form MIN:MAX (Trainer v2, PyTorchJob's elasticPolicy)
            const auto range = parse_nnodes(*v, "PET_NNODES");
            if (range.first == range.second) o.num_machines = range.first;
            else o.nnodes_range = range;
        }
    if (!o.machine_rank && !o.nnodes_range) // torchrun's c10d rendezvous ranks the nodes by arrival, as accel's
        if (auto v = env("PET_NODE_RANK")) o.machine_rank = checked_int("PET_NODE_RANK", *v, 0, 4095);
    if (!o.main_process_ip)
        if (auto v = env("PET_MASTER_ADDR")) o.main_process_ip = *v;
    if (!o.main_process_port)
        if (auto v = env("PET_MASTER_PORT")) o.main_process_port = checked_int("PET_MASTER_PORT", *v, 1, 65535);
    if (!o.max_restarts)
        if (auto v = env("PET_MAX_RESTARTS")) o.max_restarts = checked_int("PET_MAX_RESTARTS", *v, 0, 1000000);
    rdzv_env_defaults(o, env);
    if (!nproc_text) return;
    const int nproc = nproc_per_node(*nproc_text, "PET_NPROC_PER_NODE", devices);
    // PyTorchJob v1: the node's place from RANK / WORLD_SIZE / MASTER_*, where PET_* did not give it (an elastic
    // range ranks by arrival and counts processes at MAX machines, as --nnodes MIN:MAX's -n).
    if (!o.machine_rank && !o.nnodes_range)
        if (auto v = env("RANK")) o.machine_rank = checked_int("RANK (PyTorchJob's node rank)", *v, 0, 4095);
    if (!o.num_machines && !o.nnodes_range)
        if (auto v = env("WORLD_SIZE")) {
            const int total = checked_int("WORLD_SIZE (PyTorchJob's number of processes)", *v, 1, 1 << 20);
            if (total % nproc != 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "WORLD_SIZE=" + *v + " is not a multiple of PET_NPROC_PER_NODE=" +
                                                     *nproc_text + " (PyTorchJob's WORLD_SIZE counts every process "
                                                                   "of every node)");
            if (total / nproc > 4096)
                fail(ACCEL_ERR_INVALID_ARGUMENT, "WORLD_SIZE=" + *v + " / PET_NPROC_PER_NODE=" + *nproc_text +
                                                     ": more than 4096 machines");
            o.num_machines = total / nproc;
        }
    if (!o.main_process_ip)
        if (auto v = env("MASTER_ADDR")) o.main_process_ip = *v;
    if (!o.main_process_port)
        if (auto v = env("MASTER_PORT")) o.main_process_port = checked_int("MASTER_PORT", *v, 1, 65535);
    const int machines = o.nnodes_range ? o.nnodes_range->second : o.num_machines.value_or(1);
    if (!o.num_processes) o.num_processes = nproc * machines;
}

} // namespace

void cluster_env_defaults(ClusterFlags &o, const EnvLookup &env, const LocalDevices &devices)
{
    torchrun_env_defaults(o, env, devices);
    // Slurm: one `accel launch` per node (srun --ntasks-per-node=1) gets its machine from Slurm.
    if (!o.num_machines && !o.nnodes_range)
        if (auto v = env("SLURM_NNODES")) o.num_machines = checked_int("SLURM_NNODES", *v, 1, 4096);
    if (!o.machine_rank && !o.nnodes_range)
        if (auto v = env("SLURM_NODEID")) o.machine_rank = checked_int("SLURM_NODEID", *v, 0, 4095);
    if (!o.main_process_ip)
        if (auto v = env("SLURM_JOB_NODELIST"))
            if (std::string host = first_slurm_host(*v); !host.empty()) o.main_process_ip = host;
}

std::string first_slurm_host(const std::string &list)
{
    std::string host;
    for (size_t i = 0; i < list.size(); ++i) {
        char c = list[i];
        if (c == ',') break;
        if (c == '[') {
            size_t j = i + 1;
            while (j < list.size() && list[j] != '-' && list[j] != ',' && list[j] != ']') host += list[j++];
            break;
        }
        host += c;
    }
    return host;
}

void add_rendezvous_token(std::map<std::string, std::string> &env, int machines, const EnvLookup &lookup)
{
    if (machines != 1 || lookup("ACCEL_RDZV_TOKEN") || lookup("ACCEL_RDZV_TOKEN_FILE")) return;
    unsigned char bytes[32];
    size_t got = 0;
    while (got < sizeof bytes) {
        const ssize_t n = getrandom(bytes + got, sizeof bytes - got, 0);
        if (n <= 0) fail(ACCEL_ERR_INTERNAL, "accel launch: the kernel gave no random bytes for the rendezvous token");
        got += static_cast<size_t>(n);
    }
    static const char hex[] = "0123456789abcdef";
    std::string token;
    for (unsigned char b : bytes) {
        token += hex[b >> 4];
        token += hex[b & 15];
    }
    env["ACCEL_RDZV_TOKEN"] = token;
}

} // namespace accel::cli
