// CPU affinity for `accel launch --enable_cpu_affinity` (ACCELERATE_CPU_AFFINITY, a config file's
// enable_cpu_affinity): each local process gets its own block of the CPUs the launcher may use, so processes do
// not compete for cores and their OpenMP threads (OMP_NUM_THREADS = the block's size) stay on them.
#pragma once

#include <string>
#include <vector>

namespace accel::cli {

// The CPUs this process may run on (sched_getaffinity), in increasing order.
std::vector<int> allowed_cpus();

// Local process `index`'s block of `cpus` among `count` processes: contiguous, disjoint blocks, the first
// cpus.size() % count one CPU longer. Empty when there are fewer CPUs than processes (no disjoint sets exist).
std::vector<int> cpu_block(const std::vector<int> &cpus, int index, int count);

// Binds the calling process to `cpus` (sched_setaffinity); false with errno set on failure.
bool bind_to_cpus(const std::vector<int> &cpus);

// "0-3,8,10-11", as taskset and /proc/self/status's Cpus_allowed_list write it.
std::string cpu_list_text(const std::vector<int> &cpus);

} // namespace accel::cli
