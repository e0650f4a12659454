#include "data_loader/data_loader_shard.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "parallel/context_parallel/plan.hpp"
#include "state/accelerator_state.hpp"
#include "state/device.hpp"
#include "profiling/ranges.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>

namespace accel {

namespace {
// dispatch_batches null: Accelerate decides True only for iterable data sets; accel's are map-style.
// With one process there is nothing to dispatch, so the sharding path (a no-op) is used.
bool dispatches_batches(const AcceleratorState &state)
{
    return state.config.dataloader.dispatch_batches.value_or(false) && state.num_processes() > 1;
}
} // namespace

DataLoaderShard::DataLoaderShard(std::shared_ptr<const Dataset> data, config::DataLoaderOptions options)
    : data_(std::move(data)), options_(options)
{
    if (options_.seed) {
        seed_ = *options_.seed;
    } else {
        // Like Accelerate's prepare: one random int64 from the default generator seeds the sampler,
        // so accel_random_set_seed() before creating the loader makes its order reproducible.
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        seed_ = gen.get<at::CPUGeneratorImpl>()->random64() & 0x7fffffffffffffffULL;
    }
}

DataLoaderShard::DataLoaderShard(std::shared_ptr<IterableLoader> iterable, config::DataLoaderOptions options)
    : iterable_(std::move(iterable)), options_(options)
{
}

DataLoaderShard::~DataLoaderShard()
{
    if (in_pass_) end_pass();
}

ShardSpec DataLoaderShard::shard_spec() const
{
    ShardSpec s;
    if (state_) {
        // Data shards are the mesh's data-parallel ranks (tensor / context parallel peers share a batch).
        s.num_processes = state_->data_parallel_size();
        s.process_index = state_->data_parallel_rank();
        s.split_batches = state_->config.dataloader.split_batches;
        s.even_batches = even_batches_.value_or(state_->config.dataloader.even_batches);
    }
    return s;
}

void DataLoaderShard::prepare(std::shared_ptr<AcceleratorState> state)
{
    if (in_pass_) fail(ACCEL_ERR_FAILED_PRECONDITION, "dataloader: cannot be prepared in the middle of a pass");
    if (iterable_) {
        iterable_->attach(state);
        state_ = std::move(state);
        return;
    }
    ShardSpec s;
    s.num_processes = state->data_parallel_size();
    s.split_batches = state->config.dataloader.split_batches;
    // BatchSamplerShard's check (also for 1). Accelerate skips it when dispatching, where a batch_size that
    // is not a multiple of P yields empty or duplicated slices; accel keeps one rule for both modes.
    if (s.split_batches && options_.batch_size % s.num_processes != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "dataloader: batch_size " + std::to_string(options_.batch_size) +
                                             " is not a multiple of the number of processes (" +
                                             std::to_string(s.num_processes) + ") required by split_batches");
    if (dispatches_batches(*state) && !(state->comm && state->comm->size() == s.num_processes))
        fail(ACCEL_ERR_FAILED_PRECONDITION, "dataloader: dispatch_batches needs the process communicator of all " +
                                                std::to_string(s.num_processes) + " processes");
    attach(std::move(state));
    // dataloader_config.data_seed: the sampler's seed (Accelerate's SeedableRandomSampler(data_seed=...)),
    // unless the loader was created with a "seed" of its own.
    if (state_->config.dataloader.data_seed && !options_.seed) seed_ = *state_->config.dataloader.data_seed;
    // Every rank must shuffle alike before sharding: rank 0's sampler seed wins (Accelerate synchronises
    // the sampler's generator from rank 0). Collective: prepare loaders in the same order on every rank.
    // (When dispatching only rank 0 shuffles; the shared seed keeps positions and resumes identical.)
    if (state_->comm && state_->comm->size() > 1) {
        at::Tensor s = at::full({1}, static_cast<int64_t>(seed_), at::kLong);
        state_->comm->broadcast(s, 0);
        seed_ = static_cast<uint64_t>(s.item<int64_t>());
    }
}

void DataLoaderShard::attach(std::shared_ptr<AcceleratorState> state)
{
    state_ = std::move(state);
    dispatcher_.reset();
    if (state_ && dispatches_batches(*state_)) {
        DispatchSpec d;
        d.num_processes = state_->num_processes();
        d.process_index = state_->process_index();
        d.split_batches = state_->config.dataloader.split_batches;
        d.drop_last = options_.drop_last;
        dispatcher_ = std::make_unique<DataLoaderDispatcher>(state_->comm, d);
    }
}

IndexBatches DataLoaderShard::inner_batches(int64_t epoch) const
{
    const int64_t n = data_->size();
    std::vector<int64_t> order(static_cast<size_t>(n));
    if (options_.shuffle) {
        // SeedableRandomSampler: randperm on a CPU generator seeded with seed + epoch, as Python does.
        at::Generator gen = at::detail::createCPUGenerator(seed_ + static_cast<uint64_t>(epoch));
        at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
        // An empty data set has no buffer on either side: memcpy with null pointers is undefined even for 0 bytes.
        if (n > 0) std::memcpy(order.data(), perm.data_ptr<int64_t>(), order.size() * sizeof(int64_t));
    } else {
        std::iota(order.begin(), order.end(), 0);
    }
    return make_batches(order, options_.batch_size, options_.drop_last);
}

IndexBatches DataLoaderShard::pass_batches(int64_t epoch) const
{
    return shard_batches(inner_batches(epoch), options_.batch_size, options_.drop_last, shard_spec());
}

int64_t DataLoaderShard::length() const
{
    if (iterable_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "dataloader: an iterable dataset has no length (len() of its loader is "
                                            "undefined, as in PyTorch); count the batches as they come");
    int64_t full;
    if (dispatcher_) {
        const int64_t n = data_->size(), bs = options_.batch_size;
        full = dispatched_length(options_.drop_last ? n / bs : (n + bs - 1) / bs, dispatcher_->spec());
    } else {
        full = sharded_length(data_->size(), options_.batch_size, options_.drop_last, shard_spec());
    }
    return std::max<int64_t>(0, full - skip_batches_);
}

void DataLoaderShard::set_epoch(int64_t epoch)
{
    if (iterable_) return iterable_->set_epoch(epoch);
    if (epoch < 0) fail(ACCEL_ERR_OUT_OF_RANGE, "epoch: expected >= 0, got " + std::to_string(epoch));
    if (in_pass_) end_pass();
    epoch_ = epoch;
}

void DataLoaderShard::begin_pass()
{
    progress_.end_of_dataloader = false;
    progress_.remainder = -1;
    if (dispatcher_) {
        // Only rank 0 iterates the inner sampler. remainder stays -1 until the last step reports the
        // observed size (Accelerate's begin() cannot compute it for a dispatcher).
        dispatcher_->begin(state_->process_index() == 0 ? inner_batches(epoch_) : IndexBatches{}, skip_batches_);
        position_ = static_cast<size_t>(skip_batches_);
        in_pass_ = true;
        state_->gradient.enter_dataloader(&progress_);
        const auto &steps = dispatcher_->steps(); // rank 0's (empty elsewhere)
        if (options_.num_workers > 0 && dispatcher_->first_step() < steps.size())
            // Workers read rank 0's steps ahead; the steps stay fixed until the next begin().
            prefetcher_ = std::make_unique<Prefetcher>(
                [this, &steps](size_t k) { return read_batch(steps[k].indices); }, dispatcher_->first_step(), steps.size(),
                options_.num_workers, options_.prefetch_factor);
        return; // and no rng_types synchronisation: Accelerate's DataLoaderDispatcher does none
    }
    batches_ = pass_batches(epoch_);
    position_ = static_cast<size_t>(std::min<int64_t>(skip_batches_, static_cast<int64_t>(batches_.size())));
    in_pass_ = true;
    if (options_.num_workers > 0 && position_ < batches_.size())
        // Workers read this pass's batches ahead, in order; they only read batches_ (fixed until end_pass).
        prefetcher_ = std::make_unique<Prefetcher>([this](size_t k) { return read_batch(batches_[k]); }, position_,
                                                   batches_.size(), options_.num_workers, options_.prefetch_factor);
    if (state_) {
        if (!options_.drop_last) {
            const int64_t total_batch = shard_spec().split_batches ? options_.batch_size
                                                                   : options_.batch_size * state_->data_parallel_size();
            progress_.remainder = data_->size() % total_batch;
        }
        state_->gradient.enter_dataloader(&progress_);
        // rng_types "torch" / "cuda": LibTorch's default generator / this process's GPU's generator takes rank
        // 0's state at the start of every pass (synchronize_rng_states).
        const auto &rng = state_->config.rng_types;
        const auto wants = [&rng](const char *type) { return std::find(rng.begin(), rng.end(), type) != rng.end(); };
        if (state_->comm && state_->comm->size() > 1) {
            if (wants("torch")) synchronize(at::detail::getDefaultCPUGenerator());
            if (wants("cuda") && state_->device.is_cuda())
                synchronize(at::globalContext().defaultGenerator(state_->device));
        }
    }
}

void DataLoaderShard::synchronize(at::Generator gen) const
{
    at::Tensor st;
    {
        std::lock_guard<std::mutex> lock(gen.mutex());
        st = gen.get_state();
    }
    state_->comm->broadcast(st, 0);
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(st);
}

void DataLoaderShard::end_pass()
{
    if (state_) state_->gradient.leave_dataloader(&progress_);
    in_pass_ = false;
    prefetcher_.reset(); // stops the workers (before the batches they index go)
    batches_.clear();
    position_ = 0;
}

std::optional<Batch> DataLoaderShard::next()
{
    profiling::Range range(profiling::kDataWait);
    if (iterable_) {
        std::optional<Batch> b = iterable_->next();
        if (b) return placed(std::move(*b));
        return b;
    }
    if (!in_pass_) begin_pass();
    std::optional<Batch> dispatched;
    if (dispatcher_)
        dispatched = prefetcher_ ? dispatcher_->next([this](size_t k, const std::vector<int64_t> &) { return prefetcher_->take(k); },
                                                     progress_)
                                 : dispatcher_->next(*data_, progress_);
    if (dispatcher_ ? !dispatched : position_ >= batches_.size()) {
        end_pass();
        skip_batches_ = 0; // skipping applies to the first pass only
        epoch_ += 1;
        return std::nullopt;
    }
    if (dispatched) {
        ++position_;
        return placed(std::move(*dispatched));
    }
    const auto &indices = batches_[position_++];
    // Accelerate looks one batch ahead; with a known pass length the last batch is simply the last index.
    progress_.end_of_dataloader = position_ == batches_.size();
    if (prefetcher_) return placed(prefetcher_->take(position_ - 1));
    return placed(read_batch(indices));
}

Batch DataLoaderShard::read_batch(const std::vector<int64_t> &indices) const
{
    at::Tensor idx = at::empty({static_cast<int64_t>(indices.size())}, at::kLong);
    std::memcpy(idx.data_ptr<int64_t>(), indices.data(), indices.size() * sizeof(int64_t));
    Batch b = data_->get_batch(idx);
    b.indices = idx;
    return b;
}

Batch DataLoaderShard::placed(Batch b) const
{
    // Context parallelism: each rank of a cp group gets its part of every sequence (the labels were shifted
    // over the whole sequence before).
    if (state_ && state_->mesh)
        parallel::cp::split_batch(b, *state_->mesh, state_->config.parallelism.fixed_sequence_length());
    // A prepared loader yields batches on the accelerator's device (the indices stay on the host: they
    // index the dataset).
    if (state_ && state_->places_on_device()) {
        const bool non_blocking = state_->config.dataloader.non_blocking;
        b.inputs = send_to_device(b.inputs, state_->device, non_blocking);
        b.labels = send_to_device(b.labels, state_->device, non_blocking);
    }
    return b;
}

std::shared_ptr<DataLoaderShard> DataLoaderShard::skip_first_batches(int64_t num_batches) const
{
    if (iterable_) {
        auto out = std::make_shared<DataLoaderShard>(iterable_->skip_first_batches(num_batches), options_);
        out->state_ = state_;
        return out;
    }
    if (num_batches < 0) fail(ACCEL_ERR_OUT_OF_RANGE, "num_batches: expected >= 0, got " + std::to_string(num_batches));
    config::DataLoaderOptions options = options_;
    options.seed = seed_; // the same order, and no draw from the default generator
    auto out = std::make_shared<DataLoaderShard>(data_, options);
    out->epoch_ = epoch_;
    out->skip_batches_ = num_batches;
    out->attach(state_);
    return out;
}

PyRef DataLoaderShard::state_dict() const
{
    if (iterable_) return iterable_->state_dict();
    // torchdata's StatefulDataLoader.state_dict() of a single-process iterator (what Accelerate 1.x saves
    // for use_stateful_dataloader; it fast-forwards by _num_yielded), plus accel's sampler seed and pass.
    auto p = position();
    auto d = py_dict();
    py_set(*d, "_index_sampler_state", py_none());
    py_set(*d, "_sampler_iter_state", py_none());
    py_set(*d, "_sampler_iter_yielded", py_int(p.batches_yielded));
    py_set(*d, "_num_yielded", py_int(p.batches_yielded));
    py_set(*d, "_IterableDataset_len_called", py_none());
    py_set(*d, "_shared_seed", py_none());
    py_set(*d, "fetcher_state", py_none());
    py_set(*d, "dataset_state", py_none());
    py_set(*d, "_iterator_finished", py_bool(false));
    py_set(*d, "_accel_iteration", py_int(p.epoch));
    py_set(*d, "_accel_sampler_seed", py_int(static_cast<int64_t>(p.seed)));
    return d;
}

ApplyState DataLoaderShard::load_state_dict(const PyObj &d, const std::string &what)
{
    if (iterable_) return iterable_->load_state_dict(d, what);
    if (!d.is_dict()) fail(ACCEL_ERR_DATA_LOSS, what + ": not a dict");
    // accel's own keys, or those of accel before 0.1's interchange work (_iteration, _sampler_seed); a
    // state torchdata wrote (Accelerate) has only _num_yielded: this loader's seed and pass are kept.
    Position pos = position();
    pos.batches_yielded = sd_int(d, "_num_yielded", what);
    for (const char *k : {"_accel_iteration", "_iteration"})
        if (d.get(k) != nullptr) pos.epoch = sd_int(d, k, what);
    for (const char *k : {"_accel_sampler_seed", "_sampler_seed"})
        if (d.get(k) != nullptr) pos.seed = static_cast<uint64_t>(sd_int(d, k, what));
    if (pos.batches_yielded < 0 || pos.epoch < 0) fail(ACCEL_ERR_DATA_LOSS, what + ": negative position");
    return [this, pos] { restore_position(pos); };
}

} // namespace accel
