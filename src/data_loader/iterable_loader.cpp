#include "data_loader/iterable_loader.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "logging/logger.hpp"
#include "state/accelerator_state.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <cstdio>
#include <cstring>

namespace accel {

namespace {
// Accelerate: dispatch_batches None means True for iterable datasets (rank 0 reads, the others wait).
bool dispatches(const AcceleratorState &state)
{
    return state.config.dataloader.dispatch_batches.value_or(true) && state.num_processes() > 1;
}
} // namespace

IterableLoader::IterableLoader(std::shared_ptr<IterableSource> source, CollateFn collate, config::DataLoaderOptions options)
    : source_(std::move(source)), collate_(std::move(collate)), options_(options)
{
}

IterableLoader::~IterableLoader()
{
    if (in_pass_) end_pass();
}

int64_t IterableLoader::processes() const { return state_ ? state_->data_parallel_size() : 1; }
int64_t IterableLoader::rank() const { return state_ ? state_->data_parallel_rank() : 0; }
bool IterableLoader::reads() const { return !dispatcher_ || state_->process_index() == 0; }

void IterableLoader::attach(std::shared_ptr<AcceleratorState> state)
{
    if (in_pass_) end_pass();
    state_ = std::move(state);
    dispatcher_.reset();
    if (!state_) return;
    const auto &dl = state_->config.dataloader;
    // IterableDatasetShard's check (spec §4); the dispatcher's slices need it too.
    if (dl.split_batches && options_.batch_size > 1 && options_.batch_size % state_->num_processes() != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "dataloader: batch_size " + std::to_string(options_.batch_size) +
                                             " is not a multiple of the number of processes (" +
                                             std::to_string(state_->num_processes()) + ") required by split_batches");
    if (dispatches(*state_)) {
        if (!(state_->comm && state_->comm->size() == state_->num_processes()))
            fail(ACCEL_ERR_FAILED_PRECONDITION, "dataloader: dispatch_batches needs the process communicator of all processes");
        DispatchSpec d;
        d.num_processes = state_->num_processes();
        d.process_index = state_->process_index();
        d.split_batches = dl.split_batches;
        d.drop_last = options_.drop_last;
        dispatcher_ = std::make_unique<DataLoaderDispatcher>(state_->comm, d);
    }
}

void IterableLoader::set_epoch(int64_t epoch)
{
    if (epoch < 0) fail(ACCEL_ERR_OUT_OF_RANGE, "epoch: expected >= 0, got " + std::to_string(epoch));
    if (in_pass_) end_pass();
    epoch_ = epoch;
}

IterableLoader::Produced IterableLoader::read(int64_t n)
{
    Produced p;
    while (static_cast<int64_t>(p.samples.size()) < n) {
        std::optional<Sample> s = source_->next();
        if (!s) break;
        p.samples.push_back(std::move(*s));
        p.ids.push_back(read_++);
    }
    if (source_->stateful()) p.state = source_->state();
    p.read = read_;
    return p;
}

Batch IterableLoader::collated(const Produced &p) const
{
    Batch b = collate_(p.samples, p.ids);
    b.indices = at::tensor(p.ids, at::kLong);
    return b;
}

// One process, or not prepared: batches of batch_size consecutive samples, the last one short unless drop_last.
std::optional<IterableLoader::Produced> IterableLoader::produce_plain()
{
    Produced p = read(options_.batch_size);
    if (p.samples.empty() || (options_.drop_last && static_cast<int64_t>(p.samples.size()) < options_.batch_size))
        return std::nullopt;
    return p;
}

// IterableDatasetShard (spec §4): chunks of `real` samples, this process keeps positions
// [r x per_proc, (r + 1) x per_proc); a short last chunk is completed with the first full chunk (or with
// itself, repeated, when there was none) unless drop_last.
std::optional<IterableLoader::Produced> IterableLoader::produce_shard()
{
    const bool split = state_->config.dataloader.split_batches;
    const int64_t P = processes(), bs = options_.batch_size;
    const int64_t real = split ? bs : bs * P, per_proc = split ? bs / P : bs;
    Produced chunk = read(real);
    auto n = static_cast<int64_t>(chunk.samples.size());
    if (n == 0) return std::nullopt;
    if (n == real) {
        if (first_.samples.empty()) first_ = chunk;
    } else {
        if (options_.drop_last) return std::nullopt;
        const Produced source = first_.samples.empty() ? chunk : first_;
        for (size_t i = 0; n < real; ++n, ++i) {
            chunk.samples.push_back(source.samples[i % source.samples.size()]);
            chunk.ids.push_back(source.ids[i % source.ids.size()]);
        }
    }
    Produced mine;
    mine.state = chunk.state;
    mine.read = chunk.read;
    const int64_t begin = rank() * per_proc;
    mine.samples.assign(chunk.samples.begin() + begin, chunk.samples.begin() + begin + per_proc);
    mine.ids.assign(chunk.ids.begin() + begin, chunk.ids.begin() + begin + per_proc);
    return mine;
}

// Rank 0's next dispatch step (spec §6): one batch (split_batches) or P consecutive ones; a short step is
// the last one, dropped with drop_last (its short batch, and so its incomplete round).
std::optional<IterableLoader::Produced> IterableLoader::produce_step()
{
    const int64_t step = dispatcher_->spec().split_batches ? options_.batch_size : options_.batch_size * processes();
    Produced p = read(step);
    const auto n = static_cast<int64_t>(p.samples.size());
    if (n == 0) return std::nullopt;
    if (options_.drop_last && n < step) {
        // Without split_batches the full batches of a short round are dropped with it (Accelerate keeps a
        // short final round only when not drop_last).
        return std::nullopt;
    }
    if (first_.samples.empty()) first_ = p;
    return p;
}

// One thread calling the dataset ahead of the loop, up to `depth` batches (steps) queued: the dataset is still
// used from one thread at a time, and each batch keeps the state taken right after its samples were read, so
// checkpoints stay exact.
class IterableLoader::ReadAhead {
public:
    ReadAhead(std::function<std::optional<Produced>()> read, size_t depth) : read_(std::move(read)), depth_(depth)
    {
        thread_ = std::thread([this] { run(); });
    }
    ~ReadAhead()
    {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stop_ = true;
        }
        changed_.notify_all();
        thread_.join(); // a read in progress is finished and dropped
    }
    std::optional<Produced> take()
    {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return !queue_.empty() || finished_; });
        if (queue_.empty()) return std::nullopt;
        Item item = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        changed_.notify_all();
        if (item.error) std::rethrow_exception(item.error);
        return std::move(item.produced);
    }

private:
    struct Item {
        std::optional<Produced> produced;
        std::exception_ptr error;
    };
    void run()
    {
        std::unique_lock<std::mutex> lock(mutex_);
        while (!stop_) {
            changed_.wait(lock, [this] { return stop_ || queue_.size() < depth_; });
            if (stop_) break;
            lock.unlock();
            Item item;
            try {
                item.produced = read_();
            } catch (...) {
                item.error = std::current_exception();
            }
            lock.lock();
            const bool last = item.error || !item.produced;
            queue_.push_back(std::move(item));
            changed_.notify_all();
            if (last) break; // the end of the pass, or a failure: nothing more to read
        }
        finished_ = true;
        changed_.notify_all();
    }
    std::function<std::optional<Produced>()> read_;
    const size_t depth_;
    std::mutex mutex_;
    std::condition_variable changed_;
    std::deque<Item> queue_;
    bool stop_ = false, finished_ = false;
    std::thread thread_;
};

std::optional<IterableLoader::Produced> IterableLoader::produce() { return reader_ ? reader_->take() : read_next(); }

std::optional<IterableLoader::Produced> IterableLoader::read_next()
{
    if (dispatcher_) return produce_step();
    if (state_ && processes() > 1) return produce_shard();
    return produce_plain();
}

void IterableLoader::begin_pass()
{
    progress_ = DataLoaderProgress{};
    read_ = 0;
    first_ = Produced{};
    lookahead_.reset();
    looked_ahead_ = false;
    yielded_ = 0;
    in_pass_ = true;
    if (state_) state_->gradient.enter_dataloader(&progress_);
    if (dispatcher_) dispatcher_->begin_stream();
    if (!reads()) {
        yielded_ = skip_batches_; // rank 0 skips (or resumes) the same steps; the counts match
        resume_state_.reset();
        return;
    }
    source_->set_epoch(epoch_);
    if (resume_state_) {
        // A short last chunk (step) is completed with the pass's first one: read it again before jumping
        // to the saved position, so the resumed pass ends as the uninterrupted one would.
        if (!options_.drop_last && state_ && processes() > 1) {
            const int64_t n = options_.batch_size * (state_->config.dataloader.split_batches ? 1 : processes());
            Produced p = read(n);
            if (dispatcher_ || static_cast<int64_t>(p.samples.size()) == n) first_ = std::move(p);
        }
        source_->load_state(*resume_state_);
        last_state_ = *resume_state_;
        last_read_ = read_ = resume_read_;
        yielded_ = skip_batches_;
        resume_state_.reset();
        start_reader();
        return;
    }
    // A dataset without state: read the batches already taken again and drop them (torchdata's
    // fast-forward), so the pass goes on where it stopped.
    for (; yielded_ < skip_batches_; ++yielded_)
        if (!produce()) break;
    start_reader();
}

void IterableLoader::start_reader()
{
    if (options_.num_workers > 0)
        reader_ = std::make_unique<ReadAhead>([this] { return read_next(); },
                                              static_cast<size_t>(options_.num_workers * options_.prefetch_factor));
}

void IterableLoader::end_pass()
{
    reader_.reset(); // stops the reading thread first: it uses this loader
    if (state_) state_->gradient.leave_dataloader(&progress_);
    in_pass_ = false;
    lookahead_.reset();
    looked_ahead_ = false;
    first_ = Produced{};
}

std::optional<Batch> IterableLoader::next_dispatched()
{
    const int64_t P = processes();
    auto make = [&]() -> std::optional<DispatchedStep> {
        std::optional<Produced> cur = looked_ahead_ ? std::move(lookahead_) : produce();
        looked_ahead_ = false;
        lookahead_.reset();
        if (!cur) return std::nullopt;
        last_state_ = cur->state;
        last_read_ = cur->read;
        lookahead_ = produce(); // Accelerate's look-ahead: the last step carries end_of_dataloader
        looked_ahead_ = true;
        DispatchedStep s;
        s.observed = static_cast<int64_t>(cur->samples.size());
        s.is_last = !lookahead_;
        if (s.is_last && !options_.drop_last && s.observed % P != 0) {
            // The first P samples of the very first step, as padding (dispatch_steps' rule).
            const size_t n = std::min(static_cast<size_t>(P), first_.samples.size());
            cur->samples.insert(cur->samples.end(), first_.samples.begin(), first_.samples.begin() + n);
            cur->ids.insert(cur->ids.end(), first_.ids.begin(), first_.ids.begin() + n);
        }
        s.batch = collated(*cur);
        return s;
    };
    return dispatcher_->next_from(make, progress_);
}

std::optional<Batch> IterableLoader::next()
{
    if (!in_pass_) begin_pass();
    std::optional<Batch> out;
    if (dispatcher_) {
        out = next_dispatched();
    } else {
        std::optional<Produced> cur = looked_ahead_ ? std::move(lookahead_) : produce();
        lookahead_.reset();
        looked_ahead_ = false;
        if (cur) {
            last_state_ = cur->state;
            last_read_ = cur->read;
            lookahead_ = produce();
            looked_ahead_ = true;
            progress_.end_of_dataloader = !lookahead_;
            out = collated(*cur);
        }
    }
    if (!out) {
        end_pass();
        skip_batches_ = 0;
        epoch_ += 1;
        last_state_.clear();
        return std::nullopt;
    }
    ++yielded_;
    return out;
}

std::shared_ptr<IterableLoader> IterableLoader::skip_first_batches(int64_t num_batches) const
{
    if (num_batches < 0) fail(ACCEL_ERR_OUT_OF_RANGE, "num_batches: expected >= 0, got " + std::to_string(num_batches));
    auto out = std::make_shared<IterableLoader>(source_, collate_, options_);
    out->epoch_ = epoch_;
    out->skip_batches_ = num_batches;
    out->attach(state_);
    return out;
}

PyRef IterableLoader::state_dict() const
{
    // torchdata's StatefulDataLoader keys for a single-process iterator over an iterable dataset
    // ("dataset_state": the dataset's own state_dict), plus accel's pass and process count.
    std::string state = last_state_;
    int64_t read = last_read_;
    const int64_t taken = in_pass_ ? yielded_ : skip_batches_;
    if (!in_pass_ && resume_state_) {
        state = *resume_state_;
        read = resume_read_;
    }
    if (dispatcher_) {
        // Only rank 0 read the stream, and every process writes this file: all write rank 0's state.
        // Collective, like save_state.
        at::Tensor n = at::tensor({static_cast<int64_t>(state.size()), read}, at::kLong);
        state_->comm->broadcast(n, 0);
        read = n[1].item<int64_t>();
        at::Tensor bytes = at::empty({n[0].item<int64_t>()}, at::kByte);
        if (state_->process_index() == 0 && !state.empty()) std::memcpy(bytes.data_ptr(), state.data(), state.size());
        if (bytes.numel() > 0) state_->comm->broadcast(bytes, 0);
        state.assign(static_cast<const char *>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
    }
    auto d = py_dict();
    py_set(*d, "_num_yielded", py_int(taken));
    py_set(*d, "_IterableDataset_len_called", py_none());
    py_set(*d, "_shared_seed", py_none());
    py_set(*d, "fetcher_state", py_none());
    py_set(*d, "dataset_state", source_->stateful() && (taken > 0) ? py_bytes(state) : py_none());
    py_set(*d, "_iterator_finished", py_bool(false));
    py_set(*d, "_accel_iteration", py_int(epoch_));
    py_set(*d, "_accel_num_processes", py_int(state_ ? state_->num_processes() : 1));
    py_set(*d, "_accel_samples_read", py_int(read)); // positions go on from there (batch indices)
    return d;
}

ApplyState IterableLoader::load_state_dict(const PyObj &d, const std::string &what)
{
    if (!d.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    const int64_t taken = sd_int(d, "_num_yielded", what);
    const int64_t epoch = d.get("_accel_iteration") ? sd_int(d, "_accel_iteration", what) : epoch_;
    const int64_t saved_processes = d.get("_accel_num_processes") ? sd_int(d, "_accel_num_processes", what) : -1;
    if (taken < 0 || epoch < 0) fail(ACCEL_ERR_DATA_LOSS, what + ": negative position");
    std::optional<std::string> state;
    if (const PyObj *s = d.get("dataset_state"); s != nullptr && s->kind == PyObj::Kind::Bytes) state = s->s;
    if (state && !source_->stateful())
        fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": holds an iterable dataset's state, but this dataset has no "
                                                "load_state callback to take it");
    const int64_t now = state_ ? state_->num_processes() : 1;
    const int64_t read = d.get("_accel_samples_read") ? sd_int(d, "_accel_samples_read", what) : 0;
    return [this, taken, epoch, state, saved_processes, now, read] {
        if (in_pass_) end_pass();
        epoch_ = epoch;
        if (saved_processes > 0 && saved_processes != now) {
            // The stream's split between processes depends on their number: the batches taken cannot be
            // mapped onto another one. Say so and start the saved pass again.
            if (!state_ || state_->process_index() == 0)
                logging::log_as(ACCEL_LOG_WARNING, 0, static_cast<int32_t>(now),
                                logging::printf_string("load_state: the iterable data loader was saved with %lld "
                                                       "process(es) and runs on %lld: its pass %lld restarts from its "
                                                       "beginning",
                                                       static_cast<long long>(saved_processes),
                                                       static_cast<long long>(now), static_cast<long long>(epoch)));
            skip_batches_ = 0;
            resume_state_.reset();
            return;
        }
        skip_batches_ = taken;
        resume_state_ = state;
        resume_read_ = read;
    };
}

} // namespace accel
