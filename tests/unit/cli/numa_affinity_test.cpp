// accel launch's NUMA placement (src/cli/numa_affinity.cpp) on fake topologies: this machine has one NUMA node
// and no GPU, so the sysfs readers run against a fake sysfs root folder and the planner against made-up nodes.
#include "cli/numa_affinity.hpp"
#include "common/files.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace fs = std::filesystem;
using accel::cli::NumaNode;

namespace {

struct FakeSysfs {
    fs::path root = fs::temp_directory_path() / ("accel_fake_sysfs_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
    // accel::remove_all, not std::filesystem's: pip's LibTorch 2 exports a copy of that which crashes (files.cpp).
    FakeSysfs() { accel::remove_all(root); }
    ~FakeSysfs()
    {
        try {
            accel::remove_all(root);
        } catch (...) { // a destructor must not throw; a leftover temporary folder is harmless
        }
    }
    void write(const std::string &rel, const std::string &text) const
    {
        fs::create_directories((root / rel).parent_path());
        std::ofstream(root / rel) << text << "\n";
    }
};

std::vector<int> range(int lo, int hi)
{
    std::vector<int> v;
    for (int c = lo; c <= hi; ++c) v.push_back(c);
    return v;
}

} // namespace

TEST(NumaAffinity, ParsesCpuLists)
{
    EXPECT_EQ(accel::cli::parse_cpu_list("0-3,8,10-11"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
    EXPECT_EQ(accel::cli::parse_cpu_list("5\n"), (std::vector<int>{5}));
    EXPECT_TRUE(accel::cli::parse_cpu_list("").empty());
    EXPECT_TRUE(accel::cli::parse_cpu_list("3-1").empty());
    EXPECT_TRUE(accel::cli::parse_cpu_list("0-99999999").empty());
    EXPECT_TRUE(accel::cli::parse_cpu_list("a,1").empty());
}

TEST(NumaAffinity, ReadsNodesAndGpusFromSysfs)
{
    FakeSysfs s;
    s.write("sys/devices/system/node/node0/cpulist", "0-3,8-11");
    s.write("sys/devices/system/node/node1/cpulist", "4-7,12-15");
    s.write("sys/devices/system/node/possible", "0-1"); // not a node folder
    // Two NVIDIA GPUs (3D controllers) listed out of bus order, one NVIDIA audio device, one other vendor's GPU.
    s.write("sys/bus/pci/devices/0000:c1:00.0/vendor", "0x10de");
    s.write("sys/bus/pci/devices/0000:c1:00.0/class", "0x030200");
    s.write("sys/bus/pci/devices/0000:c1:00.0/local_cpulist", "4-7,12-15");
    s.write("sys/bus/pci/devices/0000:41:00.0/vendor", "0x10de");
    s.write("sys/bus/pci/devices/0000:41:00.0/class", "0x030200");
    s.write("sys/bus/pci/devices/0000:41:00.0/local_cpulist", "0-3,8-11");
    s.write("sys/bus/pci/devices/0000:41:00.1/vendor", "0x10de");
    s.write("sys/bus/pci/devices/0000:41:00.1/class", "0x040300");
    s.write("sys/bus/pci/devices/0000:05:00.0/vendor", "0x1002");
    s.write("sys/bus/pci/devices/0000:05:00.0/class", "0x030000");
    const auto nodes = accel::cli::read_numa_nodes(s.root.string());
    ASSERT_EQ(nodes.size(), 2u);
    EXPECT_EQ(nodes[0].id, 0);
    EXPECT_EQ(nodes[1].cpus, (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
    const auto gpus = accel::cli::read_nvidia_gpus(s.root.string());
    EXPECT_EQ(gpus, (std::vector<std::string>{"0000:41:00.0", "0000:c1:00.0"})); // NVML's order: by bus id
    EXPECT_EQ(accel::cli::read_device_cpus(s.root.string(), gpus[1]), (std::vector<int>{4, 5, 6, 7, 12, 13, 14, 15}));
    EXPECT_TRUE(accel::cli::read_device_cpus(s.root.string(), "../../x").empty());
    EXPECT_TRUE(accel::cli::read_numa_nodes((s.root / "missing").string()).empty());
}

TEST(NumaAffinity, TwoNodesEachProcessInOneNodeWithItsMemory)
{
    const std::vector<NumaNode> nodes = {{0, {0, 1, 2, 3, 8, 9, 10, 11}}, {1, {4, 5, 6, 7, 12, 13, 14, 15}}};
    const auto plan = accel::cli::plan_placement(range(0, 15), nodes, 4);
    ASSERT_EQ(plan.size(), 4u);
    EXPECT_EQ(plan[0].cpus, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(plan[1].cpus, (std::vector<int>{8, 9, 10, 11}));
    EXPECT_EQ(plan[2].cpus, (std::vector<int>{4, 5, 6, 7}));
    EXPECT_EQ(plan[3].cpus, (std::vector<int>{12, 13, 14, 15}));
    EXPECT_EQ(plan[0].memory_node, 0);
    EXPECT_EQ(plan[1].memory_node, 0);
    EXPECT_EQ(plan[2].memory_node, 1);
    EXPECT_EQ(plan[3].memory_node, 1);
    // 3 processes on 2 nodes: the middle one straddles them and gets no memory node.
    const auto odd = accel::cli::plan_placement(range(0, 15), nodes, 3);
    EXPECT_EQ(odd[0].memory_node, 0);
    EXPECT_EQ(odd[1].memory_node, -1);
    EXPECT_EQ(odd[2].memory_node, 1);
}

TEST(NumaAffinity, OneNodeIsPlainBlocksWithoutMemoryPolicy)
{
    const auto plan = accel::cli::plan_placement(range(0, 7), {{0, range(0, 7)}}, 2);
    EXPECT_EQ(plan[0].cpus, range(0, 3));
    EXPECT_EQ(plan[1].cpus, range(4, 7));
    EXPECT_EQ(plan[0].memory_node, -1);
    EXPECT_TRUE(accel::cli::plan_placement(range(0, 0), {}, 2)[0].cpus.empty()); // fewer CPUs than processes
}

TEST(NumaAffinity, GpusNearTheirCpusAndSharersDivide)
{
    const std::vector<NumaNode> nodes = {{0, range(0, 7)}, {1, range(8, 15)}};
    // 4 processes: GPUs 0, 1 on node 1's socket, GPUs 2, 3 on node 0's (the GPU order is not the node order).
    const std::vector<std::vector<int>> near = {range(8, 15), range(8, 15), range(0, 7), range(0, 7)};
    // The launcher may use only CPUs 0-13 (a cgroup): the usable part of each set is divided.
    const auto plan = accel::cli::plan_placement(range(0, 13), nodes, 4, near);
    EXPECT_EQ(plan[0].cpus, range(8, 10));
    EXPECT_EQ(plan[1].cpus, range(11, 13));
    EXPECT_EQ(plan[2].cpus, range(0, 3));
    EXPECT_EQ(plan[3].cpus, range(4, 7));
    EXPECT_EQ(plan[0].memory_node, 1);
    EXPECT_EQ(plan[3].memory_node, 0);
}

// Which GPU's CPUs each local process gets under CUDA_VISIBLE_DEVICES (the value the launcher passes, read as
// CUDA reads it): unset all GPUs in bus order, a reordered or shortened list, and the values that hide every GPU
// or name them by UUID give no placement by GPU.
TEST(NumaAffinity, GpuCpusFollowCudaVisibleDevices)
{
    FakeSysfs s;
    for (const auto &[bus, cpus] : {std::pair{"0000:c1:00.0", "4-7"}, std::pair{"0000:41:00.0", "0-3"}}) {
        s.write(std::string("sys/bus/pci/devices/") + bus + "/vendor", "0x10de");
        s.write(std::string("sys/bus/pci/devices/") + bus + "/class", "0x030200");
        s.write(std::string("sys/bus/pci/devices/") + bus + "/local_cpulist", cpus);
    }
    using accel::cli::gpu_cpus_of_local_processes;
    const std::string root = s.root.string();
    const std::vector<int> near0 = range(0, 3), near1 = range(4, 7);
    using Blocks = std::vector<std::vector<int>>;
    EXPECT_EQ(gpu_cpus_of_local_processes(root, 3, std::nullopt), (Blocks{near0, near1, near0}));
    EXPECT_EQ(gpu_cpus_of_local_processes(root, 2, std::string("1,0")), (Blocks{near1, near0}));
    EXPECT_EQ(gpu_cpus_of_local_processes(root, 2, std::string("1")), (Blocks{near1, near1}));
    EXPECT_EQ(gpu_cpus_of_local_processes(root, 2, std::string("0,7,1")), (Blocks{near0, near0})); // ends at 7
    EXPECT_TRUE(gpu_cpus_of_local_processes(root, 2, std::string("")).empty()); // set and empty: no GPU
    EXPECT_TRUE(gpu_cpus_of_local_processes(root, 2, std::string("1,1")).empty());
    EXPECT_TRUE(gpu_cpus_of_local_processes(root, 2, std::string("GPU-8c1f")).empty());
    EXPECT_TRUE(gpu_cpus_of_local_processes((s.root / "missing").string(), 2, std::nullopt).empty());
}

// The memory policy itself, on this machine's node 0 (every Linux machine has one): in a child process, whose
// policy the later tests do not inherit; /proc/self/numa_maps then shows "prefer:0" on its mappings.
TEST(NumaAffinity, PrefersTheNodesMemory)
{
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
        if (!accel::cli::prefer_memory_node(0)) _exit(2);
        std::ifstream maps("/proc/self/numa_maps");
        std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
        _exit(text.find("prefer:0") != std::string::npos ? 0 : 3);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "2: set_mempolicy failed; 3: numa_maps shows no prefer:0";
    EXPECT_FALSE(accel::cli::prefer_memory_node(-1));
}
