#include "distributed/send_queue.hpp"

#include "distributed/communicator.hpp"

#include <exception>
#include <utility>

namespace accel::distributed {

// One queued send: the tensor until it is posted, then the backend's work (or the failure to post).
struct QueuedSend {
    at::Tensor tensor;
    int32_t dst = 0, tag = 0;
    std::mutex mutex;
    std::condition_variable posted_cv;
    bool posted = false;
    std::shared_ptr<Work> work;
    std::exception_ptr error;
};

namespace {

class QueuedSendWork : public Work {
public:
    explicit QueuedSendWork(std::shared_ptr<QueuedSend> item) : item_(std::move(item)) {}
    void wait() override
    {
        std::shared_ptr<Work> work;
        {
            std::unique_lock<std::mutex> lock(item_->mutex);
            item_->posted_cv.wait(lock, [this] { return item_->posted; });
            if (item_->error) std::rethrow_exception(item_->error);
            work = item_->work;
        }
        work->wait();
    }
    double completed_at() const override
    {
        std::lock_guard<std::mutex> lock(item_->mutex);
        return item_->work ? item_->work->completed_at() : 0.0;
    }

private:
    std::shared_ptr<QueuedSend> item_;
};

} // namespace

SendQueue::SendQueue(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)), thread_([this] { loop(); }) {}

SendQueue::~SendQueue()
{
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
}

std::shared_ptr<Work> SendQueue::send_async(const at::Tensor &tensor, int32_t dst, int32_t tag)
{
    if (comm_->send_async_blocks()) return comm_->send_async(tensor, dst, tag);
    auto item = std::make_shared<QueuedSend>();
    item->tensor = tensor;
    item->dst = dst;
    item->tag = tag;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(item);
    }
    wake_.notify_one();
    return std::make_shared<QueuedSendWork>(std::move(item));
}

void SendQueue::loop()
{
    for (;;) {
        std::shared_ptr<QueuedSend> item;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty()) return; // stopped, nothing left to post
            item = std::move(queue_.front());
            queue_.pop_front();
        }
        std::shared_ptr<Work> work;
        std::exception_ptr error;
        try {
            work = comm_->send_async(item->tensor, item->dst, item->tag);
        } catch (...) {
            error = std::current_exception();
        }
        {
            std::lock_guard<std::mutex> lock(item->mutex);
            item->work = std::move(work);
            item->error = error;
            item->tensor = at::Tensor(); // the backend's work holds it now
            item->posted = true;
        }
        item->posted_cv.notify_all();
    }
}

} // namespace accel::distributed
