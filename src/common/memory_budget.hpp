// find_executable_batch_size's "max_memory_bytes" on the CPU: while a step runs, LibTorch's CPU allocator is
// wrapped by one that counts the bytes it hands out and fails an allocation beyond the budget the way the
// allocator fails when the machine is out of memory (c10::OutOfMemoryError, "out of memory ..."), so a CPU
// machine can search for the batch size that fits a budget smaller than its RAM. No LibTorch in the includer.
#pragma once

#include <cstdint>

namespace accel {

// Installs the counting allocator for its lifetime (the previous CPU allocator comes back after it). Tensors
// allocated under it may outlive it: their release still goes through it and is not counted any more.
// FAILED_PRECONDITION when another budget is active (the budget is process-wide).
class MemoryBudgetScope {
public:
    explicit MemoryBudgetScope(uint64_t max_bytes);
    ~MemoryBudgetScope();
    MemoryBudgetScope(const MemoryBudgetScope &) = delete;
    MemoryBudgetScope &operator=(const MemoryBudgetScope &) = delete;

    // Bytes handed out under this scope and not yet released; the most held at once.
    uint64_t held_bytes() const;
    uint64_t peak_bytes() const;
};

} // namespace accel
