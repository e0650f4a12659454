#include "data_loader/prefetcher.hpp"

#include "common/error.hpp"

namespace accel {

Prefetcher::Prefetcher(std::function<Batch(size_t)> produce, size_t start, size_t end, int64_t workers,
                       int64_t prefetch_factor)
    : produce_(std::move(produce)), end_(end), window_(static_cast<size_t>(workers * prefetch_factor)),
      next_to_produce_(start), next_to_take_(start)
{
    if (workers < 1 || prefetch_factor < 1) fail(ACCEL_ERR_INTERNAL, "prefetcher: needs workers and prefetch_factor >= 1");
    threads_.reserve(static_cast<size_t>(workers));
    try {
        for (int64_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
    } catch (...) {
        stop(); // the ones started before (std::system_error: no threads left)
        throw;
    }
}

Prefetcher::~Prefetcher() { stop(); }

void Prefetcher::stop() noexcept
{
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    taken_.notify_all();
    for (auto &t : threads_)
        if (t.joinable()) t.join();
    threads_.clear();
}

void Prefetcher::work()
{
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        // A batch is started only within the window after the next one to be taken, so a slow consumer
        // bounds the memory held by ready batches.
        taken_.wait(lock, [this] { return stopping_ || next_to_produce_ >= end_ || next_to_produce_ < next_to_take_ + window_; });
        if (stopping_ || next_to_produce_ >= end_) return;
        const size_t k = next_to_produce_++;
        lock.unlock();
        Result r;
        try {
            r.batch = produce_(k);
        } catch (...) {
            r.error = std::current_exception();
        }
        lock.lock();
        ready_.emplace(k, std::move(r));
        produced_.notify_all();
    }
}

Batch Prefetcher::take(size_t k)
{
    std::unique_lock<std::mutex> lock(mutex_);
    if (k != next_to_take_ || k >= end_)
        fail(ACCEL_ERR_INTERNAL, "prefetcher: batch " + std::to_string(k) + " asked out of order (next is " +
                                     std::to_string(next_to_take_) + ")");
    produced_.wait(lock, [this, k] { return ready_.count(k) != 0; });
    Result r = std::move(ready_.at(k));
    ready_.erase(k);
    ++next_to_take_;
    lock.unlock();
    taken_.notify_all();
    if (r.error) std::rethrow_exception(r.error);
    return std::move(r.batch);
}

} // namespace accel
