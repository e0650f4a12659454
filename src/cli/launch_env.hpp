// The flags `accel launch` takes from a cluster engine's environment when the command line leaves them out:
// torchrun's PET_* variables, PyTorchJob v1's RANK / WORLD_SIZE form, Slurm's SLURM_*; and torchrun's "N" /
// "MIN:MAX" number of nodes. Kept apart from launch.cpp (which starts processes) so that tests/fuzz can run them
// alone: a bad value is an accel::Error naming the variable, which launch turns into its usage error.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace accel::cli {

struct ClusterFlags {
    std::optional<int> num_processes, num_machines, machine_rank, main_process_port, max_restarts;
    std::optional<std::string> main_process_ip, rdzv_id;
    std::optional<std::string> rdzv_conf; // --rdzv_conf's text (checked by parse_rdzv_conf)
    // --nnodes MIN:MAX with MIN < MAX (elastic membership): machine ranks then follow the arrival, so no variable
    // fills num_machines or machine_rank.
    std::optional<std::pair<int, int>> nnodes_range;
    // The timeouts PET_RDZV_CONF gives (parsed once, there; unset: the key is absent or --rdzv_conf was given).
    std::optional<double> join_timeout, last_call_timeout;
};

// What torchrun's "cpu", "gpu" and "auto" processes per node count on this machine (its os.cpu_count() and
// torch.cuda.device_count()); asked only when a variable says one of them.
struct LocalDevices {
    std::function<int()> cpus, gpus;
};

// A variable's value; nullopt when unset or empty (torchrun treats both alike).
using EnvLookup = std::function<std::optional<std::string>(const char *name)>;
// std::getenv.
std::optional<std::string> process_env(const char *name);

// An integer in [min, max] ("what: expected an integer in min..max, got \"v\"", INVALID_ARGUMENT otherwise).
int checked_int(const std::string &what, const std::string &v, int min, int max);

// torchrun's --nnodes: "N" or "MIN:MAX" (torch.distributed.run's parse_min_max_nnodes, and its check
// 0 < MIN <= MAX); the pair (MIN, MAX). INVALID_ARGUMENT naming `what` otherwise.
std::pair<int, int> parse_nnodes(const std::string &text, const std::string &what);
// torchrun's --rdzv_conf "key=value,key=value": join_timeout and last_call_timeout (seconds in [0, 86400]) into
// the two; another key or value is an INVALID_ARGUMENT naming it and `what` (the flag or the variable).
void parse_rdzv_conf(const std::string &text, double &join_timeout, double &last_call_timeout,
                     const std::string &what = "--rdzv_conf");

// torchrun's --nproc_per_node: a number, or "cpu" (the machine's CPUs), "gpu" (its GPUs; none is a
// FAILED_PRECONDITION, as torchrun's "Cuda is not available"), "auto" (the GPUs, else the CPUs). INVALID_ARGUMENT
// naming `what` otherwise.
int nproc_per_node(const std::string &text, const std::string &what, const LocalDevices &devices);

// torch.cuda.device_count() on a machine with `gpus` NVIDIA GPUs under CUDA_VISIBLE_DEVICES's `visible` (nullopt:
// unset), read as CUDA and PyTorch's _parse_visible_devices read it: an empty value hides every GPU; the list ends
// at its first invalid entry (not an index below `gpus`; in a UUID list, one without the first entry's "GPU-" or
// "MIG-"); a repeated entry hides every GPU. UUIDs are not matched to the GPUs (no NVML): each counts, up to `gpus`.
int visible_gpus(int gpus, const std::optional<std::string> &visible);
// The entries of a set CUDA_VISIBLE_DEVICES `visible` that name a GPU, in order, read as visible_gpus reads them (it
// counts this list): indices below `gpus` ("2", "0") or UUIDs, at most `gpus`; {} when every GPU is hidden.
std::vector<std::string> visible_gpu_entries(int gpus, const std::string &visible);

// Fills the flags still unset from torchrun's PET_* (PET_NNODES "N" or "MIN:MAX": a range is nnodes_range, as
// --nnodes MIN:MAX, and PET_NODE_RANK, RANK and SLURM_NODEID are then not read; and, with PET_NPROC_PER_NODE, PyTorchJob v1's RANK,
// WORLD_SIZE, MASTER_ADDR, MASTER_PORT), then Slurm's SLURM_NNODES / SLURM_NODEID / SLURM_JOB_NODELIST.
// torchrun's rendezvous settings: PET_RDZV_ENDPOINT (host[:port], where PET_MASTER_* leave the meeting point
// open), PET_RDZV_ID, PET_RDZV_CONF; PET_RDZV_BACKEND static or c10d (accel's own store is c10d's kind), etcd
// refused by name (UNIMPLEMENTED).
void cluster_env_defaults(ClusterFlags &flags, const EnvLookup &env, const LocalDevices &devices);

// Slurm's hostlist "node[01-04],gpu7" -> "node01": the first host, without scontrol.
std::string first_slurm_host(const std::string &list);

// The rendezvous token (issue 40.4) of a job on one machine: when neither ACCEL_RDZV_TOKEN nor
// ACCEL_RDZV_TOKEN_FILE is set, a fresh one (32 random bytes from the kernel, in hex) into `env`, the workers'
// environment: never on a command line, which `ps` shows to every user of the machine. Several machines need the
// same token on each, which only the user can arrange (by environment or file): nothing is added then.
void add_rendezvous_token(std::map<std::string, std::string> &env, int machines, const EnvLookup &lookup);

} // namespace accel::cli
