#include "cli/cpu_affinity.hpp"

#include <sched.h>

namespace accel::cli {

std::vector<int> allowed_cpus()
{
    std::vector<int> out;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
    for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) out.push_back(c);
    return out;
}

std::vector<int> cpu_block(const std::vector<int> &cpus, int index, int count)
{
    const int n = static_cast<int>(cpus.size());
    if (count < 1 || index < 0 || index >= count || n < count) return {};
    const int base = n / count, extra = n % count;
    const int start = index * base + (index < extra ? index : extra);
    const int len = base + (index < extra ? 1 : 0);
    return {cpus.begin() + start, cpus.begin() + start + len};
}

bool bind_to_cpus(const std::vector<int> &cpus)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cpus) CPU_SET(c, &set);
    return sched_setaffinity(0, sizeof set, &set) == 0;
}

std::string cpu_list_text(const std::vector<int> &cpus)
{
    std::string out;
    for (size_t i = 0; i < cpus.size();) {
        size_t j = i;
        while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
        if (!out.empty()) out += ",";
        out += std::to_string(cpus[i]);
        if (j > i) out += "-" + std::to_string(cpus[j]);
        i = j + 1;
    }
    return out;
}

} // namespace accel::cli
