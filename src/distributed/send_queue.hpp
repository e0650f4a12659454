// Sends posted from a thread of their own (the pipeline's stage boundaries). Gloo writes as much of a message into
// its socket as the socket takes when the send is posted and the receiver is already waiting for it, which is what
// posting receives early arranges: the posting thread copies the message (about 0.3 ms per 512 KB activation here),
// so a stage's compute stopped for every boundary it sent. Queued here, the compute goes on at once and the copies
// run beside it, on a core of their own where there is one (a GPU's host, a CPU node with spare cores).
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

namespace accel::distributed {

class Communicator;
class Work;
struct QueuedSend; // send_queue.cpp

class SendQueue {
public:
    explicit SendQueue(std::shared_ptr<Communicator> comm);
    // Posts what is still queued (posting does not wait for the receiver), then ends the thread.
    ~SendQueue();
    SendQueue(const SendQueue &) = delete;
    SendQueue &operator=(const SendQueue &) = delete;

    // comm->send_async(tensor, dst, tag) from the queue's thread, in the order of these calls; the tensor is held
    // until then and (as with send_async) must not change before the Work's wait(), which fails as the send would
    // (a failure to post included). Where a posted send waits for its receiver (send_async_blocks: NCCL, which pairs
    // by issue order, and the backends without their own send_async) it is posted here, on the caller's thread. Over
    // MPI posting is already a hand-over to its own thread, so the queue's thread adds only a hand-over there.
    std::shared_ptr<Work> send_async(const at::Tensor &tensor, int32_t dst, int32_t tag);

private:
    void loop();

    std::shared_ptr<Communicator> comm_;
    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::shared_ptr<QueuedSend>> queue_;
    bool stop_ = false;
    std::thread thread_; // started last: the members above exist before it runs
};

} // namespace accel::distributed
