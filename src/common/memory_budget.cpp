#include "common/memory_budget.hpp"

#include "common/error.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <torch/version.h> // TORCH_VERSION_MAJOR: c10::Allocator's interface changed in LibTorch 2

#include <mutex>
#include <string>
#include <unordered_map>

namespace accel {

namespace {

// Wraps the CPU allocator that was current when a budget began. The sizes of live blocks are kept by address:
// the DataPtr's context must stay the data pointer (LibTorch's raw_allocate / raw_deleter contract), so the
// size cannot ride in it. One static instance: tensors made under a budget are released through it long after.
class CountingAllocator final : public c10::Allocator {
public:
#if TORCH_VERSION_MAJOR >= 2
    c10::DataPtr allocate(size_t n) override { return counted(n); }
    void copy_data(void *dest, const void *src, std::size_t count) const override { default_copy_data(dest, src, count); }
#else
    c10::DataPtr allocate(size_t n) const override { return counted(n); }
#endif
    c10::DataPtr counted(size_t n) const
    {
        c10::Allocator *base = nullptr;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            base = base_;
            if (active_ && held_ + n > budget_)
                throw c10::OutOfMemoryError(
                    {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                    "out of memory: max_memory_bytes (find_executable_batch_size) allows " + std::to_string(budget_) +
                        " bytes while the step runs, " + std::to_string(held_) +
                        " are held; you tried to allocate " + std::to_string(n) + " bytes.");
        }
        c10::DataPtr block = base->allocate(n); // throws as the base does when the machine is out of memory
        void *data = block.get();
        if (data == nullptr) return block; // zero bytes: nothing to count or to keep
        std::lock_guard<std::mutex> lock(mutex_);
        const size_t counted = active_ ? n : 0;
        held_ += counted;
        if (held_ > peak_) peak_ = held_;
        blocks_.emplace(data, Block{std::move(block), counted, generation_});
        return {data, data, &release, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &release; }

    static CountingAllocator &instance()
    {
        static CountingAllocator *a = new CountingAllocator(); // never destroyed: frees may come at exit
        return *a;
    }

    void begin(uint64_t budget)
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (active_)
            fail(ACCEL_ERR_FAILED_PRECONDITION, "max_memory_bytes: a find_executable_batch_size search with a memory "
                                                "budget is already running in this process (the budget counts every "
                                                "thread's allocations, so only one can run at a time)");
        c10::Allocator *current = c10::GetCPUAllocator();
        if (current == this) fail(ACCEL_ERR_INTERNAL, "max_memory_bytes: the counting allocator is already installed");
        base_ = current;
        budget_ = budget;
        held_ = peak_ = 0;
        ++generation_;
        active_ = true;
        // The highest priority: SetCPUAllocator ignores a priority lower than the current allocator's.
        c10::SetCPUAllocator(this, UINT8_MAX);
        if (c10::GetCPUAllocator() != this) {
            active_ = false;
            fail(ACCEL_ERR_INTERNAL, "max_memory_bytes: LibTorch did not accept a counting CPU allocator");
        }
    }
    void end()
    {
        std::lock_guard<std::mutex> lock(mutex_);
        c10::SetCPUAllocator(base_, UINT8_MAX);
        active_ = false; // blocks still alive are released uncounted
    }
    uint64_t held() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return held_;
    }
    uint64_t peak() const
    {
        std::lock_guard<std::mutex> lock(mutex_);
        return peak_;
    }

private:
    static void release(void *data)
    {
        if (data == nullptr) return;
        CountingAllocator &a = instance();
        c10::DataPtr block; // released after the lock: the base allocator's deleter runs outside it
        {
            std::lock_guard<std::mutex> lock(a.mutex_);
            auto b = a.blocks_.find(data);
            if (b == a.blocks_.end()) return; // cannot happen: every block it hands out is kept
            if (a.active_ && b->second.generation == a.generation_) a.held_ -= b->second.counted;
            block = std::move(b->second.ptr);
            a.blocks_.erase(b);
        }
    }

    mutable std::mutex mutex_;
    c10::Allocator *base_ = nullptr;
    bool active_ = false;
    uint64_t budget_ = 0;
    mutable uint64_t held_ = 0, peak_ = 0;
    struct Block {
        c10::DataPtr ptr;  // the base allocator's block (its deleter frees it)
        size_t counted;    // bytes counted against the budget of `generation` (0 outside a budget)
        uint64_t generation;
    };
    uint64_t generation_ = 0; // one per budget: a block of an earlier budget released later is not subtracted
    mutable std::unordered_map<void *, Block> blocks_; // every block it handed out, by address
};

} // namespace

MemoryBudgetScope::MemoryBudgetScope(uint64_t max_bytes) { CountingAllocator::instance().begin(max_bytes); }

MemoryBudgetScope::~MemoryBudgetScope() { CountingAllocator::instance().end(); }

uint64_t MemoryBudgetScope::held_bytes() const { return CountingAllocator::instance().held(); }

uint64_t MemoryBudgetScope::peak_bytes() const { return CountingAllocator::instance().peak(); }

} // namespace accel
