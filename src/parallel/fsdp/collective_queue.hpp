// CollectiveQueue: one background thread that runs a sharding engine's collectives in the order they were
// submitted, so that a unit's all-gather can be issued ahead of its use (forward/backward prefetch) and a
// unit's gradient reduction can run while backward computes the next units (overlap), as FSDP does with
// its communication streams. Every rank submits the same collectives in the same order (they follow the
// model's program), and while anything is queued the training thread issues no collective of its own:
// the engine drains the queue before it returns control (end of forward without backward, end of
// backward), so the communicator sees one ordered stream. No LibTorch.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace accel::parallel {

class CollectiveQueue {
public:
    // A submitted job; wait() returns once it ran and rethrows what it threw.
    class Ticket {
    public:
        Ticket() = default;
        bool pending() const { return state_ != nullptr; }
        void wait();

    private:
        friend class CollectiveQueue;
        struct State {
            std::mutex m;
            std::condition_variable cv;
            bool done = false;
            std::exception_ptr error;
        };
        std::shared_ptr<State> state_;
    };

    CollectiveQueue() = default;
    ~CollectiveQueue();
    CollectiveQueue(const CollectiveQueue &) = delete;
    CollectiveQueue &operator=(const CollectiveQueue &) = delete;

    // Queues `job` behind every job submitted before it (the thread starts with the first job).
    Ticket submit(std::function<void()> job);
    // Runs `job` and returns when it is done: on the calling thread when nothing is queued or running (a
    // caller that waits at once gains nothing from the thread, and on a busy machine each hand-over to it
    // costs a scheduler wake-up), else behind the rest.
    void run(std::function<void()> job);

private:
    void work();

    std::mutex m_;
    std::condition_variable cv_;
    std::deque<std::pair<std::function<void()>, std::shared_ptr<Ticket::State>>> jobs_;
    bool stop_ = false;
    size_t running_ = 0; // jobs queued or running
    std::thread thread_;
};

} // namespace accel::parallel
