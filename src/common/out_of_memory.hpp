// Out-of-memory failures, wherever they happen (issue 42.4): LibTorch's CPU allocator, CUDA's caching allocator,
// c10::OutOfMemoryError, std::bad_alloc. They are ACCEL_ERR_RESOURCE_EXHAUSTED with a message that says "out of
// memory" and names the allocation's size when the allocator said it; recognised by the allocators' own text,
// because LibTorch 1.13 throws most of them as a plain c10::Error. No LibTorch here.
#pragma once

#include <cstdint>
#include <string>

namespace accel {

// Whether an exception's message reports a failed allocation.
bool is_out_of_memory(const std::string &what);

// "out of memory (an allocation of 8000000000 bytes failed): DefaultCPUAllocator: can't allocate memory ..." from
// such a message: its first line, with the size when the allocator named one.
std::string out_of_memory_message(const std::string &what);

// When `what` is an allocation failure, throws ACCEL_ERR_RESOURCE_EXHAUSTED with "<context>: out of memory ...";
// returns otherwise. For the catch blocks that turn other LibTorch errors into argument errors (a forward pass).
void fail_if_out_of_memory(const std::string &what, const std::string &context);

// Bytes this process could ever hold: physical memory plus swap (UINT64_MAX when unknown). A model larger than
// that cannot be allocated (and Linux's default overcommit heuristic refuses such an allocation anyway): saying so
// before LibTorch tries gives RESOURCE_EXHAUSTED naming the sizes instead of an allocator error.
uint64_t memory_ceiling();

} // namespace accel
