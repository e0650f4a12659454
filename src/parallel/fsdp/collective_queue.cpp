#include "parallel/fsdp/collective_queue.hpp"

#include "distributed/collective_tracker.hpp"

namespace accel::parallel {

void CollectiveQueue::Ticket::wait()
{
    if (!state_) return;
    std::shared_ptr<State> s = std::move(state_);
    std::unique_lock<std::mutex> lock(s->m);
    s->cv.wait(lock, [&] { return s->done; });
    if (s->error) std::rethrow_exception(s->error);
}

CollectiveQueue::~CollectiveQueue()
{
    {
        std::lock_guard<std::mutex> lock(m_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join(); // runs what is queued first: a peer may be waiting for it
}

CollectiveQueue::Ticket CollectiveQueue::submit(std::function<void()> job)
{
    Ticket t;
    t.state_ = std::make_shared<Ticket::State>();
    // The job's collectives are named with what the submitting thread was doing (mismatch errors).
    job = [purpose = distributed::CollectivePurpose::current(), job = std::move(job)] {
        distributed::CollectivePurpose p(purpose);
        job();
    };
    {
        std::lock_guard<std::mutex> lock(m_);
        jobs_.emplace_back(std::move(job), t.state_);
        ++running_;
        if (!thread_.joinable()) thread_ = std::thread([this] { work(); });
    }
    cv_.notify_one();
    return t;
}

void CollectiveQueue::run(std::function<void()> job)
{
    bool idle;
    {
        std::lock_guard<std::mutex> lock(m_);
        idle = running_ == 0;
    }
    // Only the training thread submits, so nothing can be queued between the check and the job.
    if (idle) job();
    else submit(std::move(job)).wait();
}

void CollectiveQueue::work()
{
    for (;;) {
        std::pair<std::function<void()>, std::shared_ptr<Ticket::State>> item;
        {
            std::unique_lock<std::mutex> lock(m_);
            cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return;
            item = std::move(jobs_.front());
            jobs_.pop_front();
        }
        std::exception_ptr error;
        try {
            item.first();
        } catch (...) {
            error = std::current_exception();
        }
        item.first = nullptr; // what the job held (tensors) goes before anyone is told it is done
        {
            std::lock_guard<std::mutex> lock(m_);
            --running_;
        }
        {
            std::lock_guard<std::mutex> lock(item.second->m);
            item.second->done = true;
            item.second->error = error;
        }
        item.second->cv.notify_all();
    }
}

} // namespace accel::parallel
