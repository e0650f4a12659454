#include "checkpointing/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>

namespace accel::ckpt {

size_t io_threads()
{
    const unsigned n = std::thread::hardware_concurrency();
    return std::clamp<size_t>(n, 1, 4);
}

void run_jobs(const std::vector<std::function<void()>> &jobs, size_t threads)
{
    std::vector<std::exception_ptr> errors(jobs.size());
    std::atomic<size_t> next{0};
    auto worker = [&] {
        for (size_t i = next++; i < jobs.size(); i = next++) {
            try {
                jobs[i]();
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
    };
    const size_t extra = std::min(threads, jobs.size()) > 0 ? std::min(threads, jobs.size()) - 1 : 0;
    std::vector<std::thread> pool;
    pool.reserve(extra);
    try {
        for (size_t t = 0; t < extra; ++t) pool.emplace_back(worker);
    } catch (const std::system_error &) {
        // No more threads to be had: the ones started and this one do the work.
    }
    worker();
    for (auto &t : pool) t.join();
    for (auto &e : errors)
        if (e) std::rethrow_exception(e);
}

} // namespace accel::ckpt
