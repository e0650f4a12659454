// distributed/mpi_p2p: the mpi backend's posted sends and receives (send_async / recv_async: MPI_Isend / MPI_Irecv
// tested by the MPI thread between its tasks). MPI needs its launcher: the ctest entry distributed.mpi_p2p_2 runs
// these under `mpirun -np 2` (~2 s); in unit.distributed they are skipped.
#include "distributed/communicator.hpp"

#include "common/error.hpp"
#include "config/env.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>

namespace dist = accel::distributed;

namespace {

bool under_mpirun_2()
{
    const char *n = std::getenv("OMPI_COMM_WORLD_SIZE");
    return n != nullptr && std::string(n) == "2";
}

std::shared_ptr<dist::Communicator> world()
{
    static const std::shared_ptr<dist::Communicator> c = [] {
        accel::config::AcceleratorConfig config;
        config.topology = accel::config::topology_from_env();
        config.init_process_group.backend = "mpi";
        config.init_process_group.timeout = 20; // a send that waited for its receiver would deadlock below: fail then
        return dist::make_mpi_communicator(config);
    }();
    return c;
}

// 4 MiB: above every transport's eager limit, so that a send that waits for its receiver would wait here.
at::Tensor big(int32_t rank) { return at::arange(1 << 20, at::kFloat) + static_cast<float>(rank); }

} // namespace

#define ACCEL_NEEDS_MPIRUN_2()                                                                                         \
    if (!under_mpirun_2()) GTEST_SKIP() << "runs under mpirun -np 2 (ctest distributed.mpi_p2p_2)"

// A posted send returns before its receiver posts (rank 1 posts only after a later message), a receive posted
// before the peer's send gets it, and both ranks posting receive then send at once (the ring's hop) finish.
TEST(MpiP2P, PostedTransfersDoNotWaitForThePeer)
{
    ACCEL_NEEDS_MPIRUN_2();
    auto c = world();
    EXPECT_STREQ(c->backend(), "mpi");
    EXPECT_FALSE(c->send_async_blocks());
    const int32_t me = c->rank(), peer = 1 - me;
    at::Tensor got = at::empty({1 << 20}), go = at::zeros({1}, at::kInt);
    if (me == 0) {
        auto sent = c->send_async(big(0), 1, 11);
        c->send(go, 1, 12);
        sent->wait();
        EXPECT_GT(sent->completed_at(), 0.0);
        auto received = c->recv_async(got, 1, 13);
        EXPECT_EQ(received->completed_at(), 0.0);
        c->send(go, 1, 14); // only now rank 1 sends
        received->wait();
        EXPECT_TRUE(got.equal(big(1)));
    } else {
        c->recv(go, 0, 12);
        c->recv(got, 0, 11);
        EXPECT_TRUE(got.equal(big(0)));
        c->recv(go, 0, 14);
        c->send(big(1), 0, 13);
    }
    at::Tensor in = at::empty({1 << 20});
    auto received = c->recv_async(in, peer, 15);
    auto sent = c->send_async(big(me), peer, 15);
    received->wait();
    sent->wait();
    EXPECT_TRUE(in.equal(big(peer)));
}

// A work dropped unwaited is given up: a receive is cancelled (the peer's next message on its tag goes to the
// receive posted after it), a send nobody receives is kept to the exit (which must not hang: the ctest's limit), and
// the communicator goes on.
TEST(MpiP2P, DroppedWorkIsGivenUp)
{
    ACCEL_NEEDS_MPIRUN_2();
    auto c = world();
    const int32_t me = c->rank(), peer = 1 - me;
    {
        at::Tensor lost = at::empty({4});
        auto dropped = c->recv_async(lost, peer, 21);
    }
    if (me == 0) c->send_async(big(0), 1, 22); // rank 1 never receives tag 22
    c->barrier(); // the drop is seen before the barrier runs: no message below can meet the dropped receive
    at::Tensor got = at::empty({4});
    auto received = c->recv_async(got, peer, 21);
    c->send(at::full({4}, static_cast<float>(me)), peer, 21);
    received->wait();
    EXPECT_TRUE(got.equal(at::full({4}, static_cast<float>(peer))));
    at::Tensor sum = at::ones({3});
    c->allreduce(sum, dist::ReduceOp::Sum);
    EXPECT_TRUE(sum.equal(at::full({3}, 2.0f)));
}

// A message shorter than the posted receive fails the wait naming the peer and the tag, and only that wait.
TEST(MpiP2P, ShortMessageNamesPeerAndTag)
{
    ACCEL_NEEDS_MPIRUN_2();
    auto c = world();
    if (c->rank() == 0) c->send(at::ones({3}), 1, 31);
    else {
        at::Tensor got = at::empty({5});
        try {
            c->recv(got, 0, 31);
            ADD_FAILURE() << "a 3-element message into 5 elements was accepted";
        } catch (const accel::Error &e) {
            const std::string m = e.what();
            EXPECT_NE(m.find("recv from rank 0 (tag 31)"), std::string::npos) << m;
            EXPECT_NE(m.find("received 3 elements, expected 5"), std::string::npos) << m;
        }
    }
    c->barrier();
}
