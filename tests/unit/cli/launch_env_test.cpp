// accel launch's cluster variables (cli/launch_env.cpp): Kubeflow Trainer v2's PET_NPROC_PER_NODE words and
// torchrun's PET_RDZV_* settings and PET_NNODES's elastic range.
#include "cli/elastic_values.hpp"
#include "cli/launch_env.hpp"
#include "common/error.hpp"

#include <gtest/gtest.h>

#include <map>

namespace accel::cli {
namespace {

EnvLookup lookup_of(const std::map<std::string, std::string> &vars)
{
    return [vars](const char *name) -> std::optional<std::string> {
        auto it = vars.find(name);
        if (it == vars.end() || it->second.empty()) return std::nullopt;
        return it->second;
    };
}

const LocalDevices kCpuMachine{[] { return 6; }, [] { return 0; }};
const LocalDevices kGpuMachine{[] { return 6; }, [] { return 4; }};

ClusterFlags flags_of(const std::map<std::string, std::string> &vars, const LocalDevices &devices = kCpuMachine)
{
    ClusterFlags f;
    cluster_env_defaults(f, lookup_of(vars), devices);
    return f;
}

accel_status_t code_of(const std::map<std::string, std::string> &vars, std::string *message,
                       const LocalDevices &devices = kCpuMachine)
{
    try {
        flags_of(vars, devices);
    } catch (const Error &e) {
        *message = e.what();
        return e.code();
    }
    return ACCEL_OK;
}

// torchrun's determine_local_world_size: cpu = the CPUs, gpu = the GPUs, auto = the GPUs, else the CPUs.
TEST(LaunchEnvTrainerV2, ProcessesPerNodeWordsAsTorchrun)
{
    EXPECT_EQ(nproc_per_node("3", "X", kCpuMachine), 3);
    EXPECT_EQ(nproc_per_node("cpu", "X", kGpuMachine), 6);
    EXPECT_EQ(nproc_per_node("auto", "X", kGpuMachine), 4);
    EXPECT_EQ(nproc_per_node("auto", "X", kCpuMachine), 6);
    EXPECT_EQ(nproc_per_node("gpu", "X", kGpuMachine), 4);
    const auto f = flags_of({{"PET_NNODES", "2"}, {"PET_NODE_RANK", "1"}, {"PET_NPROC_PER_NODE", "auto"},
                             {"PET_MASTER_ADDR", "job-node-0-0.job"}, {"PET_MASTER_PORT", "29400"}},
                            kGpuMachine);
    EXPECT_EQ(f.num_processes, 8);
    EXPECT_EQ(f.num_machines, 2);
    EXPECT_EQ(f.machine_rank, 1);
    EXPECT_EQ(f.main_process_ip, "job-node-0-0.job");
    EXPECT_EQ(f.main_process_port, 29400);
    std::string message;
    EXPECT_EQ(code_of({{"PET_NPROC_PER_NODE", "gpu"}}, &message), ACCEL_ERR_FAILED_PRECONDITION);
    EXPECT_NE(message.find("PET_NPROC_PER_NODE=gpu: no GPU"), std::string::npos) << message;
    EXPECT_EQ(code_of({{"PET_NPROC_PER_NODE", "tpu"}}, &message), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(message.find("PET_NPROC_PER_NODE: expected a number of processes in 1..4096, cpu, gpu or auto, got \"tpu\""),
              std::string::npos) << message;
}

TEST(LaunchEnvTrainerV2, RendezvousSettingsReadOrRefusedByName)
{
    // The endpoint is the meeting point where PET_MASTER_* leave it open; IPv6 in brackets.
    auto f = flags_of({{"PET_RDZV_ENDPOINT", "[fd00::1]:29401"}, {"PET_RDZV_BACKEND", "c10d"},
                       {"PET_RDZV_ID", "job-7"}, {"PET_RDZV_CONF", "join_timeout=60,last_call_timeout=5"}});
    EXPECT_EQ(f.main_process_ip, "fd00::1");
    EXPECT_EQ(f.main_process_port, 29401);
    EXPECT_EQ(f.rdzv_id, "job-7");
    EXPECT_EQ(f.rdzv_conf, "join_timeout=60,last_call_timeout=5");
    EXPECT_EQ(f.join_timeout, 60.0); // parsed once, here: launch takes these
    EXPECT_EQ(f.last_call_timeout, 5.0);
    f = flags_of({{"PET_RDZV_CONF", "last_call_timeout=0"}});
    EXPECT_FALSE(f.join_timeout); // an absent key keeps launch's default
    EXPECT_EQ(f.last_call_timeout, 0.0);
    f = flags_of({{"PET_RDZV_ENDPOINT", "head:29402"}, {"PET_MASTER_ADDR", "master"}});
    EXPECT_EQ(f.main_process_ip, "master");
    EXPECT_EQ(f.main_process_port, 29402);
    f = flags_of({{"PET_RDZV_ENDPOINT", "head"}, {"PET_RDZV_BACKEND", "static"}});
    EXPECT_EQ(f.main_process_ip, "head");
    EXPECT_FALSE(f.main_process_port);
    std::string message;
    EXPECT_EQ(code_of({{"PET_RDZV_BACKEND", "etcd"}}, &message), ACCEL_ERR_UNIMPLEMENTED);
    EXPECT_NE(message.find("PET_RDZV_BACKEND=etcd"), std::string::npos) << message;
    EXPECT_EQ(code_of({{"PET_RDZV_BACKEND", "zookeeper"}}, &message), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(code_of({{"PET_RDZV_CONF", "read_timeout=5"}}, &message), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(message.find("PET_RDZV_CONF: unknown key \"read_timeout\""), std::string::npos) << message;
    EXPECT_EQ(code_of({{"PET_RDZV_ENDPOINT", "head:99999"}}, &message), ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_NE(message.find("PET_RDZV_ENDPOINT's port"), std::string::npos) << message;
    EXPECT_EQ(code_of({{"PET_RDZV_ENDPOINT", "[::1"}}, &message), ACCEL_ERR_INVALID_ARGUMENT);
}

// PET_NNODES=MIN:MAX (Trainer v2 and PyTorchJob's elasticPolicy pass torchrun's elastic form): the range of
// --nnodes MIN:MAX; the node's rank follows the arrival, so PET_NODE_RANK / RANK / SLURM_NODEID place nothing, and
// PET_NPROC_PER_NODE counts the processes at MAX machines (as -n with --nnodes MIN:MAX).
TEST(LaunchEnvTrainerV2, ElasticNodeRangeAsTheFlag)
{
    auto f = flags_of({{"PET_NNODES", "1:3"}, {"PET_NODE_RANK", "2"}, {"PET_NPROC_PER_NODE", "2"}, {"RANK", "1"},
                       {"WORLD_SIZE", "4"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"},
                       {"PET_RDZV_ENDPOINT", "head:29400"}, {"PET_RDZV_BACKEND", "c10d"}});
    ASSERT_TRUE(f.nnodes_range);
    EXPECT_EQ(*f.nnodes_range, std::make_pair(1, 3));
    EXPECT_FALSE(f.num_machines);
    EXPECT_FALSE(f.machine_rank);
    EXPECT_EQ(f.num_processes, 6);
    EXPECT_EQ(f.main_process_ip, "head");
    EXPECT_EQ(f.main_process_port, 29400);
    f = flags_of({{"PET_NNODES", "2:2"}, {"PET_NODE_RANK", "1"}}); // MIN = MAX: a fixed number, placed
    EXPECT_FALSE(f.nnodes_range);
    EXPECT_EQ(f.num_machines, 2);
    EXPECT_EQ(f.machine_rank, 1);
    ClusterFlags flag; // the command line wins: --num_machines 2 leaves PET_NNODES unread
    flag.num_machines = 2;
    cluster_env_defaults(flag, lookup_of({{"PET_NNODES", "1:4"}}), kCpuMachine);
    EXPECT_FALSE(flag.nnodes_range);
    std::string message;
    for (const char *bad : {"3:1", "1:2:3", "0:2", "1:x"}) {
        EXPECT_EQ(code_of({{"PET_NNODES", bad}}, &message), ACCEL_ERR_INVALID_ARGUMENT) << bad;
        EXPECT_NE(message.find("PET_NNODES"), std::string::npos) << message;
    }
}

// The launchers' store is read from the network: its numbers are checked, its texts kept short and printable.
TEST(ElasticStoreValues, CheckedBeforeUse)
{
    EXPECT_EQ(store_int("elastic/0/nodes", "2", 1, 4), 2);
    for (const char *bad : {"5", "0", "-1", "x", "", "2147483648"}) {
        try {
            store_int("elastic/0/nodes", bad, 1, 4);
            ADD_FAILURE() << bad << " accepted";
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), ACCEL_ERR_DATA_LOSS);
            EXPECT_NE(std::string(e.what()).find("under elastic/0/nodes, expected an integer in 1..4"), std::string::npos)
                << e.what();
        }
    }
    EXPECT_EQ(store_text(std::string("rank 1\n\x1b[2J", 11)), "rank 1??[2J");
    EXPECT_EQ(store_text(std::string(1000, 'a')).size(), 303u);
}

} // namespace
} // namespace accel::cli

// CUDA_VISIBLE_DEVICES as CUDA reads it (torch.cuda.device_count() under it), on a made-up machine of 4 GPUs.
TEST(LaunchEnvVisibleGpus, CudaVisibleDevicesCountedAsCudaDoes)
{
    using accel::cli::visible_gpus;
    EXPECT_EQ(visible_gpus(4, std::nullopt), 4);
    EXPECT_EQ(visible_gpus(4, std::string("")), 0); // set and empty: no GPU (unset would be all)
    EXPECT_EQ(visible_gpus(4, std::string("2,0")), 2);
    EXPECT_EQ(visible_gpus(4, std::string("0,7,1")), 1); // 7 is no GPU here: the list ends there
    EXPECT_EQ(visible_gpus(4, std::string("1,x,2")), 1);
    EXPECT_EQ(visible_gpus(4, std::string("-1")), 0);
    EXPECT_EQ(visible_gpus(4, std::string("1,1")), 0); // a repeated entry hides them all (PyTorch)
    EXPECT_EQ(visible_gpus(4, std::string("GPU-8c1f,GPU-77aa")), 2);
    EXPECT_EQ(visible_gpus(4, std::string("MIG-4b3e,MIG-19de")), 2); // MIG instances count like GPUs
    EXPECT_EQ(visible_gpus(4, std::string("GPU-8c1f,0,GPU-77aa")), 1);
    EXPECT_EQ(visible_gpus(1, std::string("GPU-8c1f,GPU-77aa")), 1);
    EXPECT_EQ(visible_gpus(0, std::string("0")), 0);
    // The entries counted, in order (the GPUs the launcher places processes by).
    using Entries = std::vector<std::string>;
    EXPECT_EQ(accel::cli::visible_gpu_entries(4, " 2, 0"), (Entries{"2", "0"}));
    EXPECT_EQ(accel::cli::visible_gpu_entries(4, "0,7,1"), (Entries{"0"}));
    EXPECT_EQ(accel::cli::visible_gpu_entries(1, "GPU-8c1f,GPU-77aa"), (Entries{"GPU-8c1f"}));
    EXPECT_TRUE(accel::cli::visible_gpu_entries(4, "1,1").empty());
}
