// distributed/thread_communicator: every collective against results computed by hand, sub-groups, point to
// point, and the failures that keep a broken test from hanging (a rank that never arrives, mismatched
// calls, a rank that throws).
#include "distributed/thread_communicator.hpp"

#include "common/error.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace dist = accel::distributed;
using std::chrono::milliseconds;

namespace {

at::Tensor floats(std::vector<float> v) { return at::tensor(v, at::kFloat); }

// The status a call failed with (ACCEL_OK when it did not fail), and its message.
template <class F>
std::pair<accel_status_t, std::string> status_of(F &&f)
{
    try {
        f();
    } catch (const accel::Error &e) {
        return {e.code(), e.what()};
    }
    return {ACCEL_OK, ""};
}

TEST(ThreadCommunicator, AllReduceEveryOp)
{
    dist::run_on_threads(3, [](const std::shared_ptr<dist::Communicator> &c) {
        const float r = static_cast<float>(c->rank());
        EXPECT_EQ(c->size(), 3);
        EXPECT_STREQ(c->backend(), "threads");
        auto value = [&] { return floats({r + 1, 10 * (r + 1)}); };
        at::Tensor t = value();
        c->allreduce(t, dist::ReduceOp::Sum);
        EXPECT_TRUE(t.equal(floats({6, 60}))) << t;
        t = value();
        c->allreduce(t, dist::ReduceOp::Avg);
        EXPECT_TRUE(t.equal(floats({2, 20}))) << t;
        t = value();
        c->allreduce_async(t, dist::ReduceOp::Max)->wait();
        EXPECT_TRUE(t.equal(floats({3, 30}))) << t;
        t = value();
        c->allreduce(t, dist::ReduceOp::Min);
        EXPECT_TRUE(t.equal(floats({1, 10}))) << t;
        // Integers average as the gloo and mpi backends do: floor(sum / n) = floor(3 / 3), floor(4 / 3).
        at::Tensor i = at::tensor({static_cast<int64_t>(c->rank()), static_cast<int64_t>(c->rank() == 2 ? 2 : 1)});
        c->allreduce(i, dist::ReduceOp::Avg);
        EXPECT_EQ(i[0].item<int64_t>(), 1);
        EXPECT_EQ(i[1].item<int64_t>(), 1);
    });
}

TEST(ThreadCommunicator, BroadcastAllGatherReduceScatter)
{
    dist::run_on_threads(2, [](const std::shared_ptr<dist::Communicator> &c) {
        const float r = static_cast<float>(c->rank());
        at::Tensor b = floats({r, r});
        c->broadcast(b, 1);
        EXPECT_TRUE(b.equal(floats({1, 1}))) << b;

        at::Tensor mine = floats({r * 2, r * 2 + 1});
        auto all = c->allgather(mine);
        ASSERT_EQ(all.size(), 2u);
        EXPECT_TRUE(all[0].equal(floats({0, 1})));
        EXPECT_TRUE(all[1].equal(floats({2, 3})));
        all[0].fill_(-1); // each rank's copies are its own
        c->barrier();

        // rank 0 [1, 2, 3, 4], rank 1 [10, 20, 30, 40]: rank 0 gets [11, 22], rank 1 [33, 44].
        at::Tensor in = floats({1, 2, 3, 4}) * (c->rank() == 0 ? 1.0f : 10.0f);
        at::Tensor out = c->reduce_scatter(in, dist::ReduceOp::Sum);
        EXPECT_TRUE(out.equal(c->rank() == 0 ? floats({11, 22}) : floats({33, 44}))) << out;
        out = c->reduce_scatter(in, dist::ReduceOp::Max);
        EXPECT_TRUE(out.equal(c->rank() == 0 ? floats({10, 20}) : floats({30, 40}))) << out;
    });
}

TEST(ThreadCommunicator, SendRecvRing)
{
    dist::run_on_threads(4, [](const std::shared_ptr<dist::Communicator> &c) {
        const int32_t n = c->size(), r = c->rank();
        c->send(floats({static_cast<float>(r)}), (r + 1) % n, 7);
        at::Tensor got = floats({-1});
        c->recv(got, (r + n - 1) % n, 7);
        EXPECT_EQ(got.item<float>(), static_cast<float>((r + n - 1) % n));
    });
}

// The default send_async / recv_async (backends without their own): a receive posted before the peer's send does
// not wait then (it would deadlock here: both ranks post first), it receives in wait().
TEST(ThreadCommunicator, ReceivePostedBeforeTheSend)
{
    dist::run_on_threads(2, [](const std::shared_ptr<dist::Communicator> &c) {
        const int32_t peer = 1 - c->rank();
        at::Tensor got = floats({-1, -1});
        auto received = c->recv_async(got, peer, 3);
        EXPECT_EQ(received->completed_at(), 0.0);
        auto sent = c->send_async(floats({static_cast<float>(c->rank()), 5}), peer, 3);
        received->wait();
        sent->wait();
        EXPECT_GT(received->completed_at(), 0.0);
        EXPECT_EQ(got[0].item<float>(), static_cast<float>(peer));
        EXPECT_EQ(got[1].item<float>(), 5.0f);
    });
}

TEST(ThreadCommunicator, SubGroups)
{
    dist::run_on_threads(4, [](const std::shared_ptr<dist::Communicator> &c) {
        const int32_t r = c->rank();
        // Every rank creates every group in the same order; a rank outside a group gets nullptr.
        auto low = c->new_group({0, 1});
        auto high = c->new_group({2, 3});
        auto evens = c->new_group({0, 2});
        EXPECT_EQ(low != nullptr, r < 2);
        EXPECT_EQ(high != nullptr, r >= 2);
        EXPECT_EQ(evens != nullptr, r % 2 == 0);
        auto mine = r < 2 ? low : high;
        EXPECT_EQ(mine->size(), 2);
        EXPECT_EQ(mine->rank(), r % 2);
        at::Tensor t = floats({static_cast<float>(r)});
        mine->allreduce(t, dist::ReduceOp::Sum);
        EXPECT_EQ(t.item<float>(), r < 2 ? 1.0f : 5.0f);
        if (evens) {
            at::Tensor e = floats({static_cast<float>(r)});
            evens->allreduce(e, dist::ReduceOp::Sum);
            EXPECT_EQ(e.item<float>(), 2.0f);
        }
        at::Tensor w = floats({1});
        c->allreduce(w, dist::ReduceOp::Sum); // the world still works
        EXPECT_EQ(w.item<float>(), 4.0f);
    });
}

TEST(ThreadCommunicator, BadArguments)
{
    auto comms = dist::make_thread_communicators(2, milliseconds(2000));
    at::Tensor t = floats({1, 2, 3});
    EXPECT_EQ(status_of([&] { comms[0]->broadcast(t, 2); }).first, ACCEL_ERR_OUT_OF_RANGE);
    EXPECT_EQ(status_of([&] { comms[0]->reduce_scatter(t, dist::ReduceOp::Sum); }).first, ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { comms[0]->new_group({1, 0}); }).first, ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(status_of([&] { comms[0]->send(t, 0, 0); }).first, ACCEL_ERR_FAILED_PRECONDITION);
    at::Tensor undefined;
    EXPECT_EQ(status_of([&] { comms[1]->allreduce(undefined, dist::ReduceOp::Sum); }).first, ACCEL_ERR_INVALID_ARGUMENT);
    EXPECT_THROW(dist::make_thread_communicators(0), accel::Error);
}

// A rank that never arrives: the waiting rank fails after the timeout naming it, and the group is poisoned.
TEST(ThreadCommunicator, MissingRankTimesOut)
{
    auto comms = dist::make_thread_communicators(3, milliseconds(150));
    at::Tensor t = floats({1});
    const auto start = std::chrono::steady_clock::now();
    auto [code, message] = status_of([&] { comms[1]->allreduce(t, dist::ReduceOp::Sum); });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(code, ACCEL_ERR_DEADLINE_EXCEEDED);
    EXPECT_NE(message.find("rank(s) 0, 2 did not arrive within 150 ms"), std::string::npos) << message;
    EXPECT_GE(waited, 0.14);
    EXPECT_LT(waited, 5.0);
    auto later = status_of([&] { comms[0]->barrier(); });
    EXPECT_EQ(later.first, ACCEL_ERR_ABORTED);
    EXPECT_NE(later.second.find("did not arrive"), std::string::npos) << later.second;
    at::Tensor r = floats({0});
    EXPECT_EQ(status_of([&] { comms[2]->recv(r, 0, 0); }).first, ACCEL_ERR_ABORTED);
}

TEST(ThreadCommunicator, RecvTimesOut)
{
    auto comms = dist::make_thread_communicators(2, milliseconds(100));
    at::Tensor r = floats({0});
    auto [code, message] = status_of([&] { comms[0]->recv(r, 1, 3); });
    EXPECT_EQ(code, ACCEL_ERR_DEADLINE_EXCEEDED);
    EXPECT_NE(message.find("nothing from rank 1 with tag 3"), std::string::npos) << message;
}

// Ranks calling different collectives all fail with FAILED_PRECONDITION naming both calls.
TEST(ThreadCommunicator, MismatchedCallsFailEveryRank)
{
    std::vector<std::pair<accel_status_t, std::string>> got(2);
    dist::run_on_threads(2, [&](const std::shared_ptr<dist::Communicator> &c) {
        at::Tensor t = floats({1, 2});
        got[static_cast<size_t>(c->rank())] = status_of([&] {
            if (c->rank() == 0) c->allreduce(t, dist::ReduceOp::Sum);
            else c->broadcast(t, 0);
        });
    });
    for (const auto &[code, message] : got) {
        EXPECT_EQ(code, ACCEL_ERR_FAILED_PRECONDITION) << message;
        EXPECT_NE(message.find("rank 0 called allreduce(sum) Float [2]"), std::string::npos) << message;
        EXPECT_NE(message.find("rank 1 called broadcast(root 0) Float [2]"), std::string::npos) << message;
    }
}

// A rank that throws releases the ranks waiting for it at once (not after the timeout), in sub-groups too,
// and run_on_threads rethrows that rank's exception, not the others' ABORTED.
TEST(ThreadCommunicator, ThrowingRankAbortsTheOthers)
{
    const auto start = std::chrono::steady_clock::now();
    std::atomic<int> aborted{0};
    try {
        dist::run_on_threads(
            3,
            [&](const std::shared_ptr<dist::Communicator> &c) {
                auto pair = c->new_group({0, 1});
                if (c->rank() == 2) throw std::runtime_error("boom on rank 2");
                auto [code, message] = status_of([&] {
                    if (c->rank() == 0) c->barrier(); // waits for rank 2
                    else pair->barrier();             // waits for rank 0, stuck in the world's barrier
                });
                if (code == ACCEL_ERR_ABORTED && message.find("rank 2 failed: boom") != std::string::npos) ++aborted;
            },
            milliseconds(20000));
        FAIL() << "run_on_threads did not rethrow";
    } catch (const std::runtime_error &e) {
        EXPECT_STREQ(e.what(), "boom on rank 2");
    }
    EXPECT_EQ(aborted.load(), 2);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

} // namespace
