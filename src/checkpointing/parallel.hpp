// Runs independent pieces of checkpoint I/O (whole files on save, tensor ranges on load) on a few threads,
// so that copying into and out of the page cache uses every core and disk writeback of one file overlaps
// the copying of the next. No LibTorch.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace accel::ckpt {

// The number of threads for checkpoint I/O: the machine's cores, at most 4 (beyond that, memory bandwidth
// and the disk are the limit), at least 1.
size_t io_threads();

// Runs every job once, on up to `threads` threads (the calling thread is one of them), taking jobs in
// order. All jobs run even when one throws; the first exception (in job order) is rethrown once all are
// done, so no job is left running against memory the caller is about to free.
void run_jobs(const std::vector<std::function<void()>> &jobs, size_t threads);

} // namespace accel::ckpt
