// DataLoaderDispatcher: Accelerate's dispatch_batches (spec/data-and-collectives.md §6). Only rank 0
// reads the data: per step it takes one inner batch (split_batches) or P consecutive ones concatenated,
// broadcasts it, and every rank keeps its slice [r*b, (r+1)*b) with b = observed // P (plus one when the
// last step was padded). The pure rules (steps, slice, length) are free functions so they can be tested
// without processes.
#pragma once

#include "data_loader/batch_sampler_shard.hpp"
#include "data_loader/dataset.hpp"
#include "state/gradient_state.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

namespace accel {

namespace distributed {
class Communicator;
}
class Dataset;

struct DispatchSpec {
    int32_t num_processes = 1;
    int32_t process_index = 0;
    bool split_batches = false;
    bool drop_last = false;
};

// One step as rank 0 broadcasts it: the sample indices (tail padding included) and how many of them
// the loader really produced (Accelerate's observed_batch_size, which becomes `remainder` at the end).
struct DispatchStep {
    std::vector<int64_t> indices;
    int64_t observed = 0;
    bool operator==(const DispatchStep &o) const { return indices == o.indices && observed == o.observed; }
};

// Rank 0's steps of one pass, from the inner (unsharded) batches of that pass. Without split_batches
// P batches are concatenated per step (a short final round is kept unless drop_last); the final step,
// when not drop_last and its size is not a multiple of P, gets the first P samples of the very first
// step appended.
std::vector<DispatchStep> dispatch_steps(const IndexBatches &inner, const DispatchSpec &spec);

// The part [begin, end) of a step's broadcast batch of `size` samples (observed + padding) that
// process spec.process_index keeps: b = observed // P, plus one when padding was appended.
std::pair<int64_t, int64_t> dispatch_slice(int64_t observed, int64_t size, const DispatchSpec &spec);

// len() of a dispatching loader whose inner loader has `inner_batches` batches: split → that;
// drop_last → inner // P; else ceil(inner / P).
int64_t dispatched_length(int64_t inner_batches, const DispatchSpec &spec);

// A step as rank 0 made it: the collated batch (tail padding included), how many of its samples are real,
// and whether it is the pass's last.
struct DispatchedStep {
    Batch batch;
    int64_t observed = 0;
    bool is_last = false;
};

class DataLoaderDispatcher {
public:
    DataLoaderDispatcher(std::shared_ptr<distributed::Communicator> comm, DispatchSpec spec);

    // Starts a pass. Rank 0 passes the inner batches of the pass and how many steps to skip
    // (skip_first_batches / a resumed checkpoint); the other ranks' arguments are ignored.
    void begin(const IndexBatches &inner, int64_t skip_steps);
    // Collective (every rank calls it the same number of times): this process's slice of the next
    // step, or nullopt when the pass is over. On the last step `progress` gets end_of_dataloader and
    // remainder = the observed size, so gather_for_metrics drops the padding.
    std::optional<Batch> next(const Dataset &data, DataLoaderProgress &progress);
    // As next(), rank 0 reading step k's samples with `read(k, indices)` (prefetch workers' batches).
    using StepReader = std::function<Batch(size_t step, const std::vector<int64_t> &indices)>;
    std::optional<Batch> next(const StepReader &read, DataLoaderProgress &progress);
    // Rank 0, after begin(): the pass's steps and the first one not skipped (what prefetch workers read).
    const std::vector<DispatchStep> &steps() const { return steps_; }
    size_t first_step() const { return next_; }

    // A pass whose steps rank 0 makes as it goes (an iterable dataset: no index batches up front).
    void begin_stream();
    // As next(), rank 0's step from `make` (called on rank 0 only; nullopt: the pass is over; an exception
    // stops every rank and is rethrown on rank 0). The step's batch carries its indices.
    std::optional<Batch> next_from(const std::function<std::optional<DispatchedStep>()> &make, DataLoaderProgress &progress);

    const DispatchSpec &spec() const { return spec_; }

private:
    std::shared_ptr<distributed::Communicator> comm_;
    DispatchSpec spec_;
    std::vector<DispatchStep> steps_; // rank 0 only
    size_t next_ = 0;                 // rank 0 only
    bool done_ = true;                // every rank: the last step (or the stop flag) was seen
    std::exception_ptr failure_;      // rank 0: preparing a step failed; next() tells everyone, then throws
};

} // namespace accel
