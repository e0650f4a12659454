// NUMA-aware placement for `accel launch --enable_cpu_affinity` (issue 41.4): which CPUs and which memory node
// each local process gets. Read from sysfs under a root folder (tests give a fake one): the NUMA nodes' CPUs
// (/sys/devices/system/node/nodeN/cpulist) and, on a GPU machine, the CPUs near each NVIDIA GPU
// (/sys/bus/pci/devices/<bus id>/local_cpulist), the GPUs in NVML's order (by PCI bus id, the order Accelerate's
// set_numa_affinity indexes with nvmlDeviceGetHandleByIndex).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace accel::cli {

struct NumaNode {
    int id = 0;
    std::vector<int> cpus;
};

struct ProcessPlacement {
    std::vector<int> cpus; // empty: not bound (fewer CPUs than processes)
    int memory_node = -1;  // the NUMA node its memory prefers; -1: none (one node, or no single node)
};

// "0-3,8,10-11" -> {0,1,2,3,8,10,11}; an empty or malformed list (or one above 65535) gives {}.
std::vector<int> parse_cpu_list(const std::string &text);

// The NUMA nodes under root + "/sys/devices/system/node" with their CPUs, by id; {} when sysfs has none.
std::vector<NumaNode> read_numa_nodes(const std::string &root);

// The PCI bus ids of the NVIDIA display/3D controllers under root + "/sys/bus/pci/devices", sorted (NVML's index
// order).
std::vector<std::string> read_nvidia_gpus(const std::string &root);

// The CPUs near the device at `bus_id` (its local_cpulist); {} when unknown.
std::vector<int> read_device_cpus(const std::string &root, const std::string &bus_id);

// The CPUs near each of `local` processes' GPU (local process i uses visible GPU i, as Accelerate's
// set_numa_affinity does): the NVIDIA GPUs under `root` in NVML's order, narrowed by CUDA_VISIBLE_DEVICES's value
// `visible` (nullopt: unset) as CUDA narrows them (visible_gpu_entries: a set, empty value hides every GPU); {}
// without GPUs, or with UUIDs in CUDA_VISIBLE_DEVICES (without NVML they are not matched to bus ids: no placement
// by GPU then). The launcher passes the variable's value, so tests give their own with a fake sysfs root.
std::vector<std::vector<int>> gpu_cpus_of_local_processes(const std::string &root, int local,
                                                          const std::optional<std::string> &visible);

// Places `local` processes on the `allowed` CPUs. gpu_cpus[i] (when given, one per process): the CPUs near
// process i's GPU; the processes that share such a set divide it among them. Otherwise, with several NUMA nodes, the
// CPUs are taken node by node so that each process's block lies in one node where the counts allow. A process's
// memory_node is the node holding all its CPUs (when there are several nodes).
std::vector<ProcessPlacement> plan_placement(const std::vector<int> &allowed, const std::vector<NumaNode> &nodes,
                                             int local, const std::vector<std::vector<int>> &gpu_cpus = {});

// Makes the calling process's memory prefer `node` (set_mempolicy MPOL_PREFERRED: allocations fall back to other
// nodes when it is full, where MPOL_BIND would fail them); false with errno set on failure.
bool prefer_memory_node(int node);

} // namespace accel::cli
