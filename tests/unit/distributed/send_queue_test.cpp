// distributed::SendQueue (the pipeline's sends posted from a thread of their own) over thread ranks: messages
// arrive in the order queued and whole, a failure to post reaches wait(), works dropped unwaited and sends still
// queued when the queue ends are posted all the same.
#include "distributed/send_queue.hpp"

#include "catch_error.hpp"
#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "distributed/thread_communicator.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace dist = accel::distributed;

TEST(SendQueue, DeliversInOrderAndWhole)
{
    dist::run_on_threads(2, [](const std::shared_ptr<dist::Communicator> &c) {
        constexpr int kMessages = 20;
        if (c->rank() == 0) {
            dist::SendQueue queue(c);
            std::vector<std::shared_ptr<dist::Work>> works;
            for (int i = 0; i < kMessages; ++i) {
                works.push_back(queue.send_async(at::full({1000}, static_cast<float>(i)), 1, 5)); // held by the queue
            }
            for (auto &w : works) w->wait();
            EXPECT_GT(works.back()->completed_at(), 0.0);
        } else {
            for (int i = 0; i < kMessages; ++i) {
                at::Tensor got = at::empty({1000});
                c->recv(got, 0, 5);
                EXPECT_TRUE(got.eq(static_cast<float>(i)).all().item<bool>()) << "message " << i;
            }
        }
    });
}

TEST(SendQueue, FailureToPostReachesWait)
{
    auto comms = dist::make_thread_communicators(2);
    dist::SendQueue queue(comms[0]);
    auto to_self = queue.send_async(at::ones({2}), 0, 1); // the backend refuses a send to oneself
    const accel::Error e = catch_error([&] { to_self->wait(); });
    EXPECT_EQ(e.code(), ACCEL_ERR_FAILED_PRECONDITION) << e.what();
}

TEST(SendQueue, DroppedAndQueuedSendsStillGoOut)
{
    dist::run_on_threads(2, [](const std::shared_ptr<dist::Communicator> &c) {
        if (c->rank() == 0) {
            dist::SendQueue queue(c);
            queue.send_async(at::full({3}, 7.0f), 1, 2); // dropped unwaited, then the queue ends at once
        } else {
            at::Tensor got = at::empty({3});
            c->recv(got, 0, 2);
            EXPECT_TRUE(got.eq(7.0f).all().item<bool>());
        }
    });
}
