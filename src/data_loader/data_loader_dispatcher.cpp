#include "data_loader/data_loader_dispatcher.hpp"

#include "common/error.hpp"
#include "data_loader/dataset.hpp"
#include "distributed/communicator.hpp"

#include <algorithm>
#include <cstring>
#include <exception>
#include <utility>

namespace accel {

std::vector<DispatchStep> dispatch_steps(const IndexBatches &inner, const DispatchSpec &spec)
{
    const size_t per_step = spec.split_batches ? 1 : static_cast<size_t>(spec.num_processes);
    std::vector<DispatchStep> steps;
    for (size_t k = 0; k < inner.size(); k += per_step) {
        const size_t end = std::min(inner.size(), k + per_step);
        // A short final round: Accelerate's _fetch_batches dispatches it only when not drop_last.
        if (end - k < per_step && spec.drop_last) break;
        DispatchStep s;
        for (size_t j = k; j < end; ++j) s.indices.insert(s.indices.end(), inner[j].begin(), inner[j].end());
        s.observed = static_cast<int64_t>(s.indices.size());
        steps.push_back(std::move(s));
    }
    const int64_t P = spec.num_processes;
    if (!spec.drop_last && !steps.empty() && steps.back().observed % P != 0) {
        // Complete the last batch with the first P samples of the very first broadcast batch.
        const auto &first = steps.front().indices;
        const std::vector<int64_t> head(first.begin(), first.begin() + std::min<int64_t>(P, steps.front().observed));
        steps.back().indices.insert(steps.back().indices.end(), head.begin(), head.end());
    }
    return steps;
}

std::pair<int64_t, int64_t> dispatch_slice(int64_t observed, int64_t size, const DispatchSpec &spec)
{
    const int64_t b = observed / spec.num_processes + (size > observed ? 1 : 0);
    // Python slicing clamps to the batch, so a tiny padded batch can leave the last ranks short.
    const int64_t begin = std::min(size, spec.process_index * b);
    return {begin, std::min(size, begin + b)};
}

int64_t dispatched_length(int64_t inner_batches, const DispatchSpec &spec)
{
    if (spec.split_batches) return inner_batches;
    if (spec.drop_last) return inner_batches / spec.num_processes;
    return (inner_batches + spec.num_processes - 1) / spec.num_processes;
}

DataLoaderDispatcher::DataLoaderDispatcher(std::shared_ptr<distributed::Communicator> comm, DispatchSpec spec)
    : comm_(std::move(comm)), spec_(spec)
{
}

void DataLoaderDispatcher::begin(const IndexBatches &inner, int64_t skip_steps)
{
    done_ = false;
    steps_.clear();
    next_ = 0;
    if (spec_.process_index != 0) return;
    failure_ = nullptr;
    try {
        steps_ = dispatch_steps(inner, spec_);
    } catch (...) {
        // Reported by next(), after telling the other ranks, which are already waiting for a step.
        steps_.clear();
        failure_ = std::current_exception();
    }
    // Skipped steps are not broadcast (Accelerate broadcasts and drops them): every rank knows the
    // count, and the padding source (the first step) is already folded into the last step.
    next_ = static_cast<size_t>(std::min<int64_t>(std::max<int64_t>(skip_steps, 0), static_cast<int64_t>(steps_.size())));
}

void DataLoaderDispatcher::begin_stream()
{
    done_ = false;
    steps_.clear();
    next_ = 0;
    failure_ = nullptr;
}

namespace {

// The step descriptor (Accelerate's broadcast_object_list of the data structure and stop flag).
enum Field {
    kHasBatch, kObserved, kSize, kIsLast, kFeatDtype, kFeatDim, kLabelDtype, kLabelDim, kMaskDtype, kMaskDim, kFields
};

// Broadcasts any dtype as raw bytes, so the backend's dtype support does not matter.
void broadcast_bytes(distributed::Communicator &comm, at::Tensor &t)
{
    const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
    if (n == 0) return; // every rank knows the size from the descriptor
    at::Tensor bytes = at::from_blob(t.data_ptr(), {n}, at::TensorOptions().dtype(at::kByte));
    comm.broadcast(bytes, 0);
}

// A field of the step (inputs, labels or attention mask): its dtype and rank in the descriptor (-1: none).
void describe(int64_t *h, Field dtype, Field dim, const at::Tensor &t)
{
    h[dtype] = t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1;
    h[dim] = t.defined() ? t.dim() : 0;
}

at::Tensor allocate(const int64_t *h, Field dtype, Field dim, const int64_t *shape)
{
    if (h[dtype] < 0) return {};
    return at::empty(at::IntArrayRef(shape, static_cast<size_t>(h[dim])),
                     at::TensorOptions().dtype(static_cast<at::ScalarType>(h[dtype])));
}

} // namespace

std::optional<Batch> DataLoaderDispatcher::next(const Dataset &data, DataLoaderProgress &progress)
{
    return next(
        [&data](size_t, const std::vector<int64_t> &indices) {
            at::Tensor idx = at::empty({static_cast<int64_t>(indices.size())}, at::kLong);
            std::memcpy(idx.data_ptr<int64_t>(), indices.data(), indices.size() * sizeof(int64_t));
            Batch b = data.get_batch(idx);
            b.indices = idx;
            return b;
        },
        progress);
}

std::optional<Batch> DataLoaderDispatcher::next(const StepReader &read, DataLoaderProgress &progress)
{
    return next_from(
        [&]() -> std::optional<DispatchedStep> {
            if (next_ >= steps_.size()) return std::nullopt;
            const DispatchStep &s = steps_[next_];
            DispatchedStep d;
            d.batch = read(next_, s.indices);
            d.observed = s.observed;
            d.is_last = next_ + 1 == steps_.size();
            ++next_;
            return d;
        },
        progress);
}

std::optional<Batch> DataLoaderDispatcher::next_from(const std::function<std::optional<DispatchedStep>()> &make,
                                                     DataLoaderProgress &progress)
{
    if (done_) return std::nullopt;
    const bool root = spec_.process_index == 0;
    at::Tensor head = at::zeros({kFields}, at::kLong);
    at::Tensor idx, features, labels, mask;
    if (root && failure_ == nullptr) {
        try {
            if (std::optional<DispatchedStep> s = make()) {
                // The shapes go out with every step, so batches may differ in shape (pad-to-longest collates).
                idx = s->batch.indices.contiguous();
                features = s->batch.inputs.contiguous();
                if (s->batch.labels.defined()) labels = s->batch.labels.contiguous();
                if (s->batch.attention_mask.defined()) mask = s->batch.attention_mask.contiguous();
                int64_t *h = head.data_ptr<int64_t>();
                h[kHasBatch] = 1;
                h[kObserved] = s->observed;
                h[kSize] = idx.numel();
                h[kIsLast] = s->is_last;
                describe(h, kFeatDtype, kFeatDim, features);
                describe(h, kLabelDtype, kLabelDim, labels);
                describe(h, kMaskDtype, kMaskDim, mask);
            }
        } catch (...) {
            failure_ = std::current_exception();
        }
    }
    if (root && failure_ != nullptr) head.data_ptr<int64_t>()[kHasBatch] = -1;
    comm_->broadcast(head, 0);
    const int64_t *h = head.data_ptr<int64_t>();
    if (h[kHasBatch] < 0) { // rank 0 could not read the step: everyone stops instead of waiting for it
        done_ = true;
        if (root) std::rethrow_exception(std::exchange(failure_, nullptr));
        fail(ACCEL_ERR_ABORTED, "dataloader: rank 0 failed to read the batch to dispatch (dispatch_batches); "
                                "its error is reported on rank 0");
    }
    if (h[kHasBatch] == 0) { // rank 0 had nothing left (an empty pass, or everything skipped)
        done_ = true;
        return std::nullopt;
    }
    at::Tensor shapes = at::empty({h[kFeatDim] + h[kLabelDim] + h[kMaskDim]}, at::kLong);
    if (root) {
        int64_t *p = shapes.data_ptr<int64_t>();
        for (const at::Tensor *t : {&features, &labels, &mask})
            for (int64_t d = 0; t->defined() && d < t->dim(); ++d) *p++ = t->size(d);
    }
    comm_->broadcast(shapes, 0);
    if (!root) {
        const int64_t *p = shapes.data_ptr<int64_t>();
        idx = at::empty({h[kSize]}, at::kLong);
        features = allocate(h, kFeatDtype, kFeatDim, p);
        labels = allocate(h, kLabelDtype, kLabelDim, p + h[kFeatDim]);
        mask = allocate(h, kMaskDtype, kMaskDim, p + h[kFeatDim] + h[kLabelDim]);
    }
    broadcast_bytes(*comm_, idx);
    broadcast_bytes(*comm_, features);
    if (labels.defined()) broadcast_bytes(*comm_, labels);
    if (mask.defined()) broadcast_bytes(*comm_, mask);

    const auto [begin, end] = dispatch_slice(h[kObserved], h[kSize], spec_);
    Batch b;
    b.indices = idx.narrow(0, begin, end - begin);
    b.inputs = features.narrow(0, begin, end - begin);
    if (labels.defined()) b.labels = labels.narrow(0, begin, end - begin);
    if (mask.defined()) b.attention_mask = mask.narrow(0, begin, end - begin);
    if (h[kIsLast] != 0) {
        done_ = true;
        progress.end_of_dataloader = true;
        progress.remainder = h[kObserved];
    }
    return b;
}

} // namespace accel
