// Process-wide allocation behaviour that training needs (see docs/concepts/differences.md, "Memory").
#pragma once

namespace accel {

// Raises glibc's trim and mmap thresholds once per process when `enabled` (ACCEL_MALLOC_TUNING=0 turns it off).
// Why: glibc returns every freed multi-MiB tensor to the kernel and faults it back in on the next
// step; measured here it made a LibTorch training step ~20 % slower (shared/design/performance.md).
void tune_allocator_once(bool enabled);
bool allocator_tuned();
// Gives the heap's free pages back to the kernel now (glibc's malloc_trim), whatever the thresholds: for the
// rare moments when memory freed must stop counting at once (zero3_init_flag frees each layer as it is built).
void return_free_memory();

} // namespace accel
