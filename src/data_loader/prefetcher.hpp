// Worker threads that read batches ahead (PyTorch DataLoader's num_workers / prefetch_factor, as threads:
// the datasets are the caller's objects in this process). Batch k is produced by whichever worker is free,
// but handed out strictly in order k = start, start + 1, ..., so the batches and their order do not depend
// on the number of workers. At most workers x prefetch_factor batches are in flight or waiting.
#pragma once

#include "data_loader/dataset.hpp"

#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace accel {

class Prefetcher {
public:
    // produce(k) makes batch k (from a worker thread; may throw: take(k) rethrows it); k in [start, end).
    Prefetcher(std::function<Batch(size_t)> produce, size_t start, size_t end, int64_t workers, int64_t prefetch_factor);
    ~Prefetcher(); // stops the workers (a batch being produced is finished and dropped)
    Prefetcher(const Prefetcher &) = delete;
    Prefetcher &operator=(const Prefetcher &) = delete;

    // Batch k, the next one in order (waits for it).
    Batch take(size_t k);

private:
    void work();
    void stop() noexcept;

    std::function<Batch(size_t)> produce_;
    const size_t end_;
    const size_t window_;
    size_t next_to_produce_; // guarded by mutex_
    size_t next_to_take_;    // guarded by mutex_
    bool stopping_ = false;
    struct Result {
        Batch batch;
        std::exception_ptr error;
    };
    std::map<size_t, Result> ready_;
    std::mutex mutex_;
    std::condition_variable produced_, taken_;
    std::vector<std::thread> threads_;
};

} // namespace accel
