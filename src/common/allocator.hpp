// Process-wide allocation behaviour that training needs (see README, "Memory").
#pragma once

namespace accel {

// Raises glibc's trim and mmap thresholds once per process when `enabled` (ACCEL_MALLOC_TUNING=0 turns it off).
// Why: glibc returns every freed multi-MiB tensor to the kernel and faults it back in on the next
// step; measured here it made a LibTorch training step ~20 % slower (shared/design/performance.md).
void tune_allocator_once(bool enabled);
bool allocator_tuned();

} // namespace accel
