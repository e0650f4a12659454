#include "optimizer/optimizer_offload.hpp"

#include "common/error.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "common/offload_files.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <future>
#include <utility>

namespace accel {

OptimizerOffload::OptimizerOffload(AcceleratedOptimizer &owner, const std::string &device,
                                   std::unique_ptr<OffloadFiles> files)
    : owner_(owner), device_(device), files_(std::move(files))
{
    if ((device_ == "nvme") != static_cast<bool>(files_))
        fail(ACCEL_ERR_INTERNAL, "optimizer offload: files are for the \"nvme\" device only");
    slots_.resize(owner_.params().size());
}

OptimizerOffload::~OptimizerOffload() = default;

int64_t OptimizerOffload::offloaded_bytes() const
{
    if (!files_) return owner_.state_bytes();
    int64_t n = 0;
    for (const auto &s : slots_)
        if (s.out) n += s.bytes;
    return n;
}

void OptimizerOffload::note_peak(int64_t in_flight) { peak_ = std::max(peak_, owner_.state_bytes() + in_flight); }

std::vector<at::Tensor> OptimizerOffload::take(size_t i)
{
    const at::Tensor p = owner_.params()[i];
    std::vector<at::Tensor> state = owner_.state_tensors(p);
    Slot &s = slots_[i];
    s.layout.clear();
    s.numels.clear();
    s.bytes = 0;
    std::vector<at::Tensor> empties;
    for (const auto &t : state) {
        s.layout.push_back(t.defined() ? at::empty({0}, t.options()) : at::Tensor());
        s.numels.push_back(t.defined() ? t.numel() : 0);
        if (t.defined()) s.bytes += t.numel() * static_cast<int64_t>(t.element_size());
        empties.push_back(s.layout.back());
    }
    // The optimizer keeps empty tensors of the right dtype meanwhile: a shape error, never a crash, if
    // anything reached the state while it is out.
    if (!state.empty()) owner_.set_state_tensors(p, empties);
    s.out = !state.empty();
    return state;
}

std::vector<at::Tensor> OptimizerOffload::read(size_t i) const
{
    const Slot &s = slots_[i];
    std::vector<at::Tensor> tensors;
    std::vector<std::pair<void *, size_t>> pieces;
    for (size_t k = 0; k < s.layout.size(); ++k) {
        if (!s.layout[k].defined()) {
            tensors.emplace_back();
            continue;
        }
        tensors.push_back(at::empty({s.numels[k]}, s.layout[k].options()));
        pieces.emplace_back(tensors.back().data_ptr(), tensors.back().nbytes());
    }
    files_->read(i, pieces);
    return tensors;
}

void OptimizerOffload::install(size_t i, const std::vector<at::Tensor> &tensors)
{
    owner_.set_state_tensors(owner_.params()[i], tensors);
    slots_[i].out = false;
}

namespace {
std::vector<std::pair<const void *, size_t>> pieces_of(const std::vector<at::Tensor> &tensors)
{
    std::vector<std::pair<const void *, size_t>> pieces;
    for (const auto &t : tensors)
        if (t.defined()) pieces.emplace_back(t.data_ptr(), t.nbytes());
    return pieces;
}
} // namespace

namespace {
// Sets every parameter's gradient aside (show(i) makes parameter i's visible again, hide(i) not) and puts
// them all back when it goes, however the step ends.
class OneGradientAtATime {
public:
    explicit OneGradientAtATime(const std::vector<at::Tensor> &params) : params_(params), grads_(params.size())
    {
        for (size_t i = 0; i < params_.size(); ++i) {
            grads_[i] = params_[i].grad();
            if (grads_[i].defined()) order.push_back(i);
            params_[i].mutable_grad().reset();
        }
    }
    ~OneGradientAtATime()
    {
        for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad() = grads_[i];
    }
    void show(size_t i) { params_[i].mutable_grad() = grads_[i]; }
    void hide(size_t i) { params_[i].mutable_grad().reset(); }
    std::vector<size_t> order; // the parameters with a gradient

private:
    const std::vector<at::Tensor> &params_;
    std::vector<at::Tensor> grads_;
};
} // namespace

namespace {
// Parameter shards paged around a step that goes through `order` one shard at a time: the next shard is read
// while one steps and the last one written meanwhile, so at most three are in memory. Whatever is still in
// flight is waited for when this goes (its error dropped: the first one is already on its way).
class PagedShards {
public:
    PagedShards(const PageFn &page, const std::vector<size_t> &order) : page_(page), order_(order)
    {
        if (page_ && !order_.empty()) reading_ = page_(order_[0], true);
    }
    ~PagedShards()
    {
        for (auto *wait : {&reading_, &writing_}) {
            if (!*wait) continue;
            try {
                std::exchange(*wait, nullptr)();
            } catch (...) {
            }
        }
    }
    PagedShards(const PagedShards &) = delete;
    PagedShards &operator=(const PagedShards &) = delete;

    // Shard order[k] is in memory once this returns; order[k + 1]'s read has started.
    void before(size_t k)
    {
        if (!page_) return;
        std::exchange(reading_, nullptr)();
        if (k + 1 < order_.size()) reading_ = page_(order_[k + 1], true);
    }
    // Shard order[k] stepped: its write starts once the previous one's is over.
    void after(size_t k)
    {
        if (!page_) return;
        finish();
        writing_ = page_(order_[k], false);
    }
    void finish()
    {
        if (writing_) std::exchange(writing_, nullptr)();
    }

private:
    const PageFn &page_;
    const std::vector<size_t> &order_;
    std::function<void()> reading_, writing_;
};
} // namespace

void step_each_shard(const std::vector<at::Tensor> &params, const std::function<void()> &inner, const PageFn &page)
{
    OneGradientAtATime grads(params);
    PagedShards shards(page, grads.order);
    for (size_t k = 0; k < grads.order.size(); ++k) {
        const size_t i = grads.order[k];
        shards.before(k);
        grads.show(i);
        inner();
        grads.hide(i);
        shards.after(k);
    }
    shards.finish();
}

void OptimizerOffload::step(const std::function<void()> &inner, const PageFn &page_param)
{
    if (!files_) {
        if (page_param) step_each_shard(owner_.params(), inner, page_param);
        else inner();
        return;
    }
    const std::vector<at::Tensor> params = owner_.params();
    OneGradientAtATime grads(params); // only one gradient is visible at a time
    const std::vector<size_t> &order = grads.order;

    std::future<std::vector<at::Tensor>> reading;
    size_t reading_index = SIZE_MAX;
    std::future<void> writing;
    size_t writing_index = SIZE_MAX;
    std::vector<at::Tensor> written; // kept until the write is done: put back if it fails
    auto start_read = [&](size_t i) {
        if (!slots_[i].out) return;
        reading_index = i;
        reading = std::async(std::launch::async, [this, i] { return read(i); });
    };
    auto finish_read = [&](size_t i) {
        if (reading_index != i) return;
        reading_index = SIZE_MAX;
        install(i, reading.get());
    };
    auto finish_write = [&] {
        if (writing_index == SIZE_MAX) return;
        const size_t i = writing_index;
        writing_index = SIZE_MAX;
        try {
            writing.get();
        } catch (...) {
            install(i, written); // still whole in memory: the step's result is not lost
            written.clear();
            throw;
        }
        slots_[i].saved = true;
        written.clear();
    };
    PagedShards shards(page_param, order);
    try {
        if (!order.empty()) start_read(order[0]);
        for (size_t k = 0; k < order.size(); ++k) {
            const size_t i = order[k];
            finish_read(i);
            if (k + 1 < order.size()) start_read(order[k + 1]);
            shards.before(k);
            grads.show(i);
            slots_[i].saved = false;
            inner();
            grads.hide(i);
            shards.after(k);
            // The most that is ever in memory: this shard's state, the next one's being read, the last one's
            // being written.
            int64_t in_flight = reading_index != SIZE_MAX ? slots_[reading_index].bytes : 0;
            for (const auto &t : written)
                if (t.defined()) in_flight += static_cast<int64_t>(t.nbytes());
            note_peak(in_flight);
            finish_write();
            written = take(i);
            writing_index = i;
            writing = std::async(std::launch::async, [this, i, pieces = pieces_of(written)] { files_->write(i, pieces); });
        }
        finish_write();
        shards.finish();
    } catch (...) {
        // Let the workers finish before their memory goes; the first failure is reported.
        try {
            if (reading_index != SIZE_MAX) reading.wait();
            finish_write();
        } catch (...) {
        }
        throw;
    }
}

void OptimizerOffload::page_in_all()
{
    if (!files_) return;
    for (size_t i = 0; i < slots_.size(); ++i)
        if (slots_[i].out) install(i, read(i));
    note_peak(0);
}

void OptimizerOffload::page_out_all(bool changed)
{
    if (!files_) return;
    const std::vector<at::Tensor> params = owner_.params();
    for (size_t i = 0; i < slots_.size(); ++i) {
        if (slots_[i].out || owner_.state_tensors(params[i]).empty()) continue;
        const bool in_file = slots_[i].saved && !changed;
        std::vector<at::Tensor> state = take(i);
        if (!in_file) {
            try {
                files_->write(i, pieces_of(state));
            } catch (...) {
                install(i, state);
                throw;
            }
            slots_[i].saved = true;
        }
    }
}

} // namespace accel
