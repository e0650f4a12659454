// Runs independent pieces of checkpoint I/O (whole files on save, tensor ranges on load) on a few threads,
// so that copying into and out of the page cache uses every core and disk writeback of one file overlaps
// the copying of the next. No LibTorch.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace accel {

// The number of threads for checkpoint I/O: the CPUs this process may use, at most 4 (beyond that, memory
// bandwidth and the disk are the limit), at least 1.
size_t io_threads();

// Large byte ranges are cut into pieces of this size, so that one big tensor still keeps every thread busy.
constexpr size_t kIoPiece = size_t(32) << 20;

// Appends jobs running fn(at, len) for the pieces [at, at + len) of [0, total).
void add_piece_jobs(std::vector<std::function<void()>> &jobs, size_t total,
                    const std::function<void(size_t at, size_t len)> &fn);

// The threads worth starting for `bytes` of I/O: below 16 MiB starting threads costs more than it saves.
size_t io_threads_for(size_t bytes);

// Runs every job once, on up to `threads` threads (the calling thread is one of them), taking jobs in
// order. All jobs run even when one throws; the first exception (in job order) is rethrown once all are
// done, so no job is left running against memory the caller is about to free.
void run_jobs(const std::vector<std::function<void()>> &jobs, size_t threads);

} // namespace accel
