// DataLoaderShard: batches of a map-style dataset (dataset.hpp), shuffled by a seedable sampler, sharded
// across processes once prepared, telling the gradient state when its last batch is out. It is the
// loader behind every accel_dataloader_t: with dataloader_config.dispatch_batches and several processes
// its batches come from a DataLoaderDispatcher instead (rank 0 reads, everyone gets a slice), while the
// sampler seed, epochs, skipping and checkpoint positions stay here, shared by both modes.
#pragma once

#include "config/dataloader_options.hpp"
#include "data_loader/batch_sampler_shard.hpp"
#include "data_loader/data_loader_dispatcher.hpp"
#include "data_loader/dataset.hpp"
#include "data_loader/iterable_loader.hpp"
#include "data_loader/prefetcher.hpp"
#include "state/gradient_state.hpp"
#include "state/state_dict.hpp"

#include <ATen/ATen.h>

#include <memory>
#include <optional>

namespace accel {

struct AcceleratorState;

class DataLoaderShard {
public:
    DataLoaderShard(std::shared_ptr<const Dataset> data, config::DataLoaderOptions options);
    // A loader over an iterable dataset: every call below goes to `iterable` (no sampler, no length).
    DataLoaderShard(std::shared_ptr<IterableLoader> iterable, config::DataLoaderOptions options);
    const config::DataLoaderOptions &options() const { return options_; }
    ~DataLoaderShard();
    DataLoaderShard(const DataLoaderShard &) = delete;
    DataLoaderShard &operator=(const DataLoaderShard &) = delete;

    // The next batch, or nullopt at the end of a pass (the next call starts pass epoch + 1).
    std::optional<Batch> next();
    int64_t length() const;
    int64_t epoch() const { return iterable_ ? iterable_->epoch() : epoch_; }
    void set_epoch(int64_t epoch);
    // A loader over the same data whose current pass skips its first `num_batches` batches.
    std::shared_ptr<DataLoaderShard> skip_first_batches(int64_t num_batches) const;

    // The indices of one pass for this process (after shuffling, batching and sharding; not meaningful
    // when dispatching, where rank 0 decides).
    IndexBatches pass_batches(int64_t epoch) const;
    // The unsharded batches of one pass (Accelerate's inner batch sampler).
    IndexBatches inner_batches(int64_t epoch) const;
    bool dispatches() const { return dispatcher_ != nullptr; }
    bool iterable() const { return iterable_ != nullptr; }
    // join_uneven_inputs(even_batches=...): overrides dataloader_config.even_batches from the next pass on
    // (nullopt: the accelerator's value again), as Accelerate sets its batch sampler's even_batches.
    void set_even_batches(std::optional<bool> even_batches) { even_batches_ = even_batches; }
    std::optional<bool> even_batches_override() const { return even_batches_; }

    void prepare(std::shared_ptr<AcceleratorState> state);

    // Where iteration stands, for checkpointing: the sampler seed, the pass (epoch) and how many
    // batches of it were already yielded (skipped ones included).
    struct Position {
        uint64_t seed = 0;
        int64_t epoch = 0;
        int64_t batches_yielded = 0;
    };
    Position position() const { return {seed_, epoch_, in_pass_ ? static_cast<int64_t>(position_) : skip_batches_}; }
    // The next batch becomes the first unseen one of that pass (skip_first_batches semantics).
    void restore_position(const Position &p)
    {
        if (in_pass_) end_pass();
        seed_ = p.seed;
        epoch_ = p.epoch;
        skip_batches_ = p.batches_yielded;
    }
    const std::shared_ptr<AcceleratorState> &prepared_by() const { return state_; }

    // dl_state_dict.bin: the position as a dict named after torchdata's StatefulDataLoader state where a
    // key exists there (_num_yielded, _iteration), plus the sampler seed.
    PyRef state_dict() const;
    // Checks such a dict (DATA_LOSS naming `what`) and returns the function that restores the position.
    ApplyState load_state_dict(const PyObj &state_dict, const std::string &what);

private:
    Batch placed(Batch b) const;
    // The collated samples `indices`, with their indices (any thread: prefetch workers).
    Batch read_batch(const std::vector<int64_t> &indices) const;
    // `gen` takes rank 0's state.
    void synchronize(at::Generator gen) const;
    void begin_pass();
    void end_pass();
    ShardSpec shard_spec() const;
    // Binds to a state (after prepare's checks), creating the dispatcher when the state asks for one.
    void attach(std::shared_ptr<AcceleratorState> state);

    std::shared_ptr<const Dataset> data_;
    std::shared_ptr<IterableLoader> iterable_; // instead of data_ for an iterable dataset
    std::unique_ptr<Prefetcher> prefetcher_;   // num_workers > 0: the current pass's batches, read ahead
    config::DataLoaderOptions options_;
    uint64_t seed_ = 0;
    int64_t epoch_ = 0;          // Accelerate's `iteration`: pass k shuffles with seed + k
    int64_t skip_batches_ = 0;   // for the first pass only (skip_first_batches)
    IndexBatches batches_;       // the current pass
    size_t position_ = 0;
    bool in_pass_ = false;
    DataLoaderProgress progress_;
    std::shared_ptr<AcceleratorState> state_;
    std::unique_ptr<DataLoaderDispatcher> dispatcher_; // dispatch_batches with several processes
    std::optional<bool> even_batches_;                 // set_even_batches
};

} // namespace accel
