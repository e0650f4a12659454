#include "common/job_pool.hpp"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <system_error>
#include <thread>

namespace accel {

namespace {
// Set on run_jobs' worker threads: a job that runs jobs of its own (a file's pieces inside a save's
// files) runs them on its own thread instead of multiplying the threads.
thread_local bool t_in_job = false;
} // namespace

size_t io_threads()
{
    // The CPUs this process may run on (affinity, e.g. one core per rank under mpirun), not the machine's.
    cpu_set_t set;
    CPU_ZERO(&set);
    const int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    return std::clamp<size_t>(static_cast<size_t>(n), 1, 4);
}

void add_piece_jobs(std::vector<std::function<void()>> &jobs, size_t total,
                    const std::function<void(size_t at, size_t len)> &fn)
{
    for (size_t at = 0; at < total; at += kIoPiece) {
        const size_t len = std::min(kIoPiece, total - at);
        jobs.emplace_back([fn, at, len] { fn(at, len); });
    }
}

size_t io_threads_for(size_t bytes) { return bytes >= (size_t(16) << 20) ? io_threads() : 1; }

void run_jobs(const std::vector<std::function<void()>> &jobs, size_t threads)
{
    if (t_in_job) threads = 1;
    std::vector<std::exception_ptr> errors(jobs.size());
    std::atomic<size_t> next{0};
    auto worker = [&] {
        const bool was_in_job = t_in_job;
        t_in_job = true;
        for (size_t i = next++; i < jobs.size(); i = next++) {
            try {
                jobs[i]();
            } catch (...) {
                errors[i] = std::current_exception();
            }
        }
        t_in_job = was_in_job;
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

} // namespace accel
