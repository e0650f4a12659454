// IterableLoader: batches of an iterable dataset (a stream without a length, PyTorch's IterableDataset),
// behind a DataLoaderShard. Prepared on P > 1 processes it follows Accelerate's prepare_data_loader for
// iterable datasets (spec/data-and-collectives.md): dispatch_batches (the default for them) has rank 0 read
// one step (a batch with split_batches, else P batches) and send every process its slice through the
// DataLoaderDispatcher; otherwise every process reads the whole stream and keeps its part of every chunk
// of P x batch_size samples (IterableDatasetShard, §4). Resume: the dataset's own state after the last
// batch taken (torchdata's StatefulDataLoader keeps "dataset_state" likewise), or, for a dataset without
// state, re-reading the pass and dropping the batches already taken.
#pragma once

#include "config/dataloader_options.hpp"
#include "data_loader/collate.hpp"
#include "data_loader/data_loader_dispatcher.hpp"
#include "state/gradient_state.hpp"
#include "state/state_dict.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace accel {

struct AcceleratorState;

// The caller's stream. Used from one thread at a time.
class IterableSource {
public:
    virtual ~IterableSource() = default;
    virtual void set_epoch(int64_t epoch) = 0;           // starts pass `epoch`
    virtual std::optional<Sample> next() = 0;            // nullopt at the end of the pass
    virtual bool stateful() const = 0;                   // has state() / load_state()
    virtual std::string state() = 0;                     // the position, as bytes
    virtual void load_state(const std::string &state) = 0;
};

// Samples -> batch; ids[i] is sample i's position in the pass (errors name it).
using CollateFn = std::function<Batch(const std::vector<Sample> &, const std::vector<int64_t> &)>;

class IterableLoader {
public:
    IterableLoader(std::shared_ptr<IterableSource> source, CollateFn collate, config::DataLoaderOptions options);
    ~IterableLoader();
    IterableLoader(const IterableLoader &) = delete;
    IterableLoader &operator=(const IterableLoader &) = delete;

    // Binds to the accelerator's processes (the loader's prepare checks came first).
    void attach(std::shared_ptr<AcceleratorState> state);
    std::optional<Batch> next();
    int64_t epoch() const { return epoch_; }
    void set_epoch(int64_t epoch);
    // A loader over the same stream whose current pass drops its first `num_batches` batches.
    std::shared_ptr<IterableLoader> skip_first_batches(int64_t num_batches) const;

    PyRef state_dict() const;
    ApplyState load_state_dict(const PyObj &state_dict, const std::string &what);

private:
    struct Produced {
        std::vector<Sample> samples;
        std::vector<int64_t> ids; // positions in the pass
        std::string state;        // the source's state once these samples were read
        int64_t read = 0;         // samples of the pass read by then
    };
    std::optional<Produced> produce(); // this process's next batch (rank 0's next step when dispatching)
    std::optional<Produced> read_next(); // produce() on the calling thread
    std::optional<Produced> produce_plain();
    std::optional<Produced> produce_shard();
    std::optional<Produced> produce_step();
    Produced read(int64_t n);
    Batch collated(const Produced &p) const;
    std::optional<Batch> next_dispatched();
    bool reads() const; // this process reads the stream (everyone, or rank 0 when dispatching)
    void begin_pass();
    void start_reader();
    void end_pass();
    int64_t processes() const;
    int64_t rank() const;

    std::shared_ptr<IterableSource> source_;
    CollateFn collate_;
    config::DataLoaderOptions options_;
    std::shared_ptr<AcceleratorState> state_;
    std::unique_ptr<DataLoaderDispatcher> dispatcher_;
    int64_t epoch_ = 0;
    int64_t skip_batches_ = 0;              // first pass only
    std::optional<std::string> resume_state_; // first pass only: the source's state to load
    int64_t resume_read_ = 0;                 // ... and the samples read by then
    int64_t yielded_ = 0;                   // batches of the current pass taken (skipped ones included)
    bool in_pass_ = false;
    int64_t read_ = 0;                      // samples read this pass
    Produced first_;                        // shard: the first full chunk; dispatch: the first step
    std::optional<Produced> lookahead_;     // the batch (step) after the one being yielded
    bool looked_ahead_ = false;
    std::string last_state_;                // the state after the last batch taken
    int64_t last_read_ = 0;                 // the samples read by then
    DataLoaderProgress progress_;
    class ReadAhead;
    std::unique_ptr<ReadAhead> reader_; // num_workers > 0: a thread running read_next() ahead (the current pass)
};

} // namespace accel
