// distributed/nccl_communicator: backend "nccl" in a world of one process. Without a GPU (this build
// machine) it must fail with a status that says why, never crash; with a GPU (never run yet) the
// collectives of one process must return their input. Passes whether or not NCCL was compiled in.
#include "distributed/communicator.hpp"

#include "common/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <unistd.h>

namespace dist = accel::distributed;

namespace {

accel::config::AcceleratorConfig nccl_config(const std::string &store_file)
{
    accel::config::AcceleratorConfig c;
    c.init_process_group.backend = "nccl";
    c.init_process_group.init_method = "file://" + store_file;
    c.init_process_group.timeout = 60;
    return c;
}

// Only reached on a machine with a CUDA device: a world of one returns its input (never run here).
void check_one_process_collectives(dist::Communicator &comm)
{
    EXPECT_STREQ(comm.backend(), "nccl");
    at::Tensor f = at::arange(6, at::kFloat);
    for (auto op : {dist::ReduceOp::Sum, dist::ReduceOp::Avg, dist::ReduceOp::Max, dist::ReduceOp::Min}) {
        at::Tensor t = f.clone();
        comm.allreduce(t, op);
        EXPECT_TRUE(t.equal(f)) << dist::reduce_op_name(op);
    }
    at::Tensor i = at::arange(5, at::kLong);
    at::Tensor ti = i.clone();
    comm.allreduce_async(ti, dist::ReduceOp::Avg)->wait();
    EXPECT_TRUE(ti.equal(i));
    auto all = comm.allgather(f.view({2, 3}));
    ASSERT_EQ(all.size(), 1u);
    EXPECT_TRUE(all[0].equal(f.view({2, 3})));
    at::Tensor b = f.clone();
    comm.broadcast(b, 0);
    EXPECT_TRUE(b.equal(f));
    EXPECT_TRUE(comm.reduce_scatter(f.view({2, 3}), dist::ReduceOp::Sum).equal(f.view({2, 3})));
    comm.barrier();
    auto group = comm.new_group({0});
    ASSERT_NE(group, nullptr);
    at::Tensor g = f.clone();
    group->allreduce(g, dist::ReduceOp::Sum);
    EXPECT_TRUE(g.equal(f));
    EXPECT_THROW(comm.broadcast(b, 1), accel::Error);
}

} // namespace

TEST(NcclCommunicator, ReportsWhyItCannotRunOrRuns)
{
    char path[] = "/tmp/accel_nccl_store_XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    close(fd);
    std::remove(path);
    for (int attempt = 0; attempt < 2; ++attempt) { // the second call repeats the first one's reason
        try {
            auto comm = dist::make_nccl_communicator(nccl_config(path));
            ASSERT_TRUE(dist::nccl_compiled()) << "a communicator without the backend compiled in";
            check_one_process_collectives(*comm);
        } catch (const accel::Error &e) {
            std::string msg = e.what();
            std::printf("[ backend nccl, attempt %d ] %s\n", attempt + 1, msg.c_str());
            EXPECT_NE(msg.find("kwargs_handlers.init_process_group.backend"), std::string::npos) << msg;
            if (!dist::nccl_compiled()) {
                EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << msg;
                EXPECT_NE(msg.find("was not compiled into this accel"), std::string::npos) << msg;
            } else if (e.code() == ACCEL_ERR_UNAVAILABLE) {
                EXPECT_NE(msg.find("no CUDA device: cudaGetDeviceCount returned "), std::string::npos) << msg;
                EXPECT_NE(msg.find("on rank 0"), std::string::npos) << msg;
            } else {
                // The CUDA runtime or NCCL is not installed where this runs: the message names which.
                EXPECT_EQ(e.code(), ACCEL_ERR_UNIMPLEMENTED) << msg;
                EXPECT_TRUE(msg.find("libcudart") != std::string::npos || msg.find("libnccl") != std::string::npos)
                    << msg;
            }
        }
    }
    std::remove(path);
}

TEST(NcclCommunicator, BuildInfoListsItExactlyWhenCompiled)
{
    auto b = dist::compiled_backends();
    EXPECT_EQ(b.front(), "single");
    EXPECT_EQ(std::find(b.begin(), b.end(), "gloo") != b.end(), dist::gloo_compiled());
    EXPECT_EQ(std::find(b.begin(), b.end(), "nccl") != b.end(), dist::nccl_compiled());
}
