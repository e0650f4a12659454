#include "cli/numa_affinity.hpp"

#include "cli/cpu_affinity.hpp"
#include "cli/launch_config.hpp"
#include "cli/launch_env.hpp"

#include <linux/mempolicy.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <dirent.h>
#include <fstream>
#include <map>
#include <sstream>

namespace accel::cli {

namespace {

std::string read_line(const std::string &path)
{
    std::ifstream f(path);
    std::string s;
    std::getline(f, s);
    return s;
}

std::vector<std::string> entries(const std::string &dir)
{
    std::vector<std::string> out;
    if (DIR *d = opendir(dir.c_str())) {
        while (const dirent *e = readdir(d)) out.emplace_back(e->d_name);
        closedir(d);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// A decimal number of at most 5 digits, or -1.
int small_number(const std::string &s)
{
    if (s.empty() || s.size() > 5 || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return -1;
    return std::stoi(s);
}

} // namespace

std::vector<int> parse_cpu_list(const std::string &text)
{
    std::vector<int> out;
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        while (!item.empty() && (item.back() == '\n' || item.back() == ' ')) item.pop_back();
        const size_t dash = item.find('-');
        const int lo = small_number(item.substr(0, dash));
        const int hi = dash == std::string::npos ? lo : small_number(item.substr(dash + 1));
        if (lo < 0 || hi < lo || hi > 65535) return {};
        for (int c = lo; c <= hi; ++c) out.push_back(c);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

std::vector<NumaNode> read_numa_nodes(const std::string &root)
{
    std::vector<NumaNode> nodes;
    const std::string dir = root + "/sys/devices/system/node";
    for (const std::string &name : entries(dir)) {
        if (name.rfind("node", 0) != 0) continue;
        const int id = small_number(name.substr(4));
        if (id < 0) continue;
        nodes.push_back({id, parse_cpu_list(read_line(dir + "/" + name + "/cpulist"))});
    }
    std::sort(nodes.begin(), nodes.end(), [](const NumaNode &a, const NumaNode &b) { return a.id < b.id; });
    return nodes;
}

std::vector<std::string> read_nvidia_gpus(const std::string &root)
{
    std::vector<std::string> out;
    const std::string dir = root + "/sys/bus/pci/devices";
    for (const std::string &bus : entries(dir)) {
        if (bus == "." || bus == "..") continue;
        const std::string vendor = read_line(dir + "/" + bus + "/vendor"), cls = read_line(dir + "/" + bus + "/class");
        // 0x10de: NVIDIA; class 0x0300xx VGA or 0x0302xx 3D controller (the data-center GPUs).
        if (vendor == "0x10de" && (cls.rfind("0x0300", 0) == 0 || cls.rfind("0x0302", 0) == 0)) out.push_back(bus);
    }
    return out; // entries() sorted them: NVML's order is the PCI bus id order
}

std::vector<int> read_device_cpus(const std::string &root, const std::string &bus_id)
{
    if (bus_id.find('/') != std::string::npos) return {};
    return parse_cpu_list(read_line(root + "/sys/bus/pci/devices/" + bus_id + "/local_cpulist"));
}

std::vector<std::vector<int>> gpu_cpus_of_local_processes(const std::string &root, int local,
                                                          const std::optional<std::string> &visible)
{
    std::vector<std::string> gpus = read_nvidia_gpus(root);
    if (visible) {
        std::vector<std::string> chosen;
        for (const std::string &entry : visible_gpu_entries(static_cast<int>(gpus.size()), *visible)) {
            const std::optional<int> k = parse_int_in(entry, 0, static_cast<int>(gpus.size()) - 1);
            if (!k) return {}; // a UUID
            chosen.push_back(gpus[static_cast<size_t>(*k)]);
        }
        gpus = chosen;
    }
    if (gpus.empty()) return {};
    std::vector<std::vector<int>> out;
    for (int i = 0; i < local; ++i) {
        out.push_back(read_device_cpus(root, gpus[static_cast<size_t>(i) % gpus.size()]));
        if (out.back().empty()) return {};
    }
    return out;
}

std::vector<ProcessPlacement> plan_placement(const std::vector<int> &allowed, const std::vector<NumaNode> &nodes,
                                             int local, const std::vector<std::vector<int>> &gpu_cpus)
{
    std::vector<ProcessPlacement> plan(static_cast<size_t>(std::max(local, 0)));
    if (local < 1) return plan;
    auto keep_allowed = [&](const std::vector<int> &cpus) {
        std::vector<int> out;
        for (int c : cpus)
            if (std::binary_search(allowed.begin(), allowed.end(), c)) out.push_back(c);
        return out;
    };
    if (gpu_cpus.size() == static_cast<size_t>(local)) {
        // Processes near the same CPUs (GPUs on one socket) divide them.
        std::map<std::vector<int>, std::vector<int>> sharing; // usable CPUs -> processes
        for (int i = 0; i < local; ++i) sharing[keep_allowed(gpu_cpus[static_cast<size_t>(i)])].push_back(i);
        for (const auto &[cpus, procs] : sharing)
            for (size_t k = 0; k < procs.size(); ++k)
                plan[static_cast<size_t>(procs[k])].cpus =
                    cpu_block(cpus, static_cast<int>(k), static_cast<int>(procs.size()));
    } else {
        // Node by node: contiguous blocks of this order stay within a node when the counts divide.
        std::vector<int> order;
        for (const NumaNode &n : nodes)
            for (int c : keep_allowed(n.cpus)) order.push_back(c);
        for (int c : allowed)
            if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
        for (int i = 0; i < local; ++i) plan[static_cast<size_t>(i)].cpus = cpu_block(order, i, local);
    }
    if (nodes.size() < 2) return plan;
    for (ProcessPlacement &p : plan)
        for (const NumaNode &n : nodes)
            if (!p.cpus.empty() && std::all_of(p.cpus.begin(), p.cpus.end(), [&](int c) {
                    return std::binary_search(n.cpus.begin(), n.cpus.end(), c);
                }))
                p.memory_node = n.id;
    return plan;
}

bool prefer_memory_node(int node)
{
    if (node < 0 || node >= 1024) return false;
    unsigned long mask[1024 / (8 * sizeof(unsigned long))] = {};
    mask[static_cast<size_t>(node) / (8 * sizeof(unsigned long))] |= 1UL << (static_cast<size_t>(node) % (8 * sizeof(unsigned long)));
    return syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask, 1024UL) == 0;
}

} // namespace accel::cli
