#include "parallel/ddp.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "parallel/join.hpp"
#include "parallel/whole_gradients.hpp"
#include "profiling/ranges.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <mutex>

namespace accel::parallel {

namespace {
constexpr int64_t kFirstBucketBytes = 1024 * 1024; // torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
} // namespace

struct DistributedDataParallel::Impl {
    struct Param {
        std::string name;
        at::Tensor tensor;
        size_t bucket = 0;
        int64_t offset = 0;
        int64_t numel = 0;
    };
    struct Bucket {
        at::Tensor flat;       // gradients, laid out param after param
        at::Tensor wire;       // what is all-reduced: flat itself, or its fp16/bf16 copy (comm_hook)
        std::vector<size_t> params;
        size_t pending = 0;
        std::shared_ptr<distributed::Work> work;
        double launched_at = 0.0;
    };

    std::vector<Param> params;
    std::vector<at::Tensor> all_params; // frozen ones too (clipping skips them; memory counts them)
    std::vector<std::pair<std::string, at::Tensor>> buffers;
    std::vector<Bucket> buckets;
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators; // keeps the hooked nodes alive
    std::shared_ptr<distributed::Communicator> comm;
    config::DistributedDataParallelKwargs kw;
    at::ScalarType wire_dtype = at::kFloat; // comm_hook
    bool compress = false;
    // join_uneven_inputs: bucket all-reduces wait for finish(), which announces them first (parallel/join.hpp).
    std::shared_ptr<Join> join;
    size_t join_index = 0;
    bool hold_launches = false;

    bool require_sync = true;
    bool active = false; // a hook fired since the last finish_backward
    std::vector<bool> ready;
    size_t next_launch = 0;
    double first_launch = 0.0;
    DdpStats stats;

    void reset()
    {
        std::fill(ready.begin(), ready.end(), false);
        for (auto &b : buckets) {
            b.pending = b.params.size();
            b.work.reset();
        }
        next_launch = 0;
        first_launch = 0.0;
        active = true;
    }

    at::Tensor view_of(const Param &p) const
    {
        return buckets[p.bucket].flat.narrow(0, p.offset, p.numel).view(p.tensor.sizes());
    }

    // The gradient of parameter i is final for this backward: put it in its bucket.
    void mark_ready(size_t i, bool from_hook)
    {
        if (!active) reset();
        if (ready[i]) return;
        ready[i] = true;
        Param &p = params[i];
        at::Tensor view = view_of(p);
        at::Tensor &grad = p.tensor.mutable_grad();
        if (grad.defined()) {
            if (kw.gradient_as_bucket_view) {
                if (grad.data_ptr() != view.data_ptr()) {
                    view.copy_(grad);
                    grad = view; // the gradient now lives in the bucket: no copy back after the allreduce
                }
            } else {
                view.copy_(grad);
            }
        } else {
            view.zero_(); // unused on this rank (find_unused_parameters)
        }
        (void)from_hook;
        Bucket &b = buckets[p.bucket];
        if (--b.pending == 0) launch_ready();
    }

    // Buckets go out in index order on every rank, so that the collectives match.
    void launch_ready()
    {
        if (hold_launches) return;
        while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
            Bucket &b = buckets[next_launch++];
            const int32_t world = comm->size();
            if (compress) {
                b.wire = b.flat.to(wire_dtype);
                b.wire.div_(world);
            } else {
                b.flat.div_(world);
                b.wire = b.flat;
            }
            b.launched_at = distributed::now_seconds();
            if (first_launch == 0.0) first_launch = b.launched_at;
            b.work = comm->allreduce_async(b.wire, distributed::ReduceOp::Sum);
        }
    }

    // Inside join_uneven_inputs: every bucket is full; tell the ranks that ran out of batches, then send.
    void launch_announced()
    {
        try {
            join->notify(join_index, Join::Op::Gradients);
        } catch (...) {
            active = false;
            throw;
        }
        hold_launches = false;
        launch_ready();
        hold_launches = true;
    }

    // Parameters (frozen ones too) and buffers from `root`, as DDP's _sync_module_states.
    void sync_state_from(int32_t root)
    {
        at::NoGradGuard no_grad;
        for (const at::Tensor &param : all_params) broadcast_into(param.detach(), root);
        sync_buffers_from(root);
    }

    void sync_buffers_from(int32_t root)
    {
        at::NoGradGuard no_grad;
        for (auto &b : buffers)
            if (b.second.defined()) broadcast_into(b.second, root);
    }

    void broadcast_into(const at::Tensor &target, int32_t root)
    {
        at::Tensor t = target.contiguous();
        comm->broadcast(t, root);
        if (t.data_ptr() != target.data_ptr()) target.copy_(t);
        // The collective wrote the memory as no tensor op does: what caches the values (dynamo_backend "ofi"'s
        // frozen copy) checks the version counter.
        else torch::autograd::impl::bump_version(target);
    }

    void finish()
    {
        if (!require_sync) {
            active = false;
            return;
        }
        const double t0 = distributed::now_seconds();
        at::NoGradGuard no_grad;
        if (!active) return; // the model took no part in this backward: nothing to synchronise
        profiling::Range range(profiling::kGradientSync);
        std::vector<std::string> unused;
        for (size_t i = 0; i < params.size(); ++i)
            if (!ready[i]) unused.push_back(params[i].name);
        if (!unused.empty() && !kw.find_unused_parameters) {
            active = false;
            std::string names;
            for (size_t i = 0; i < unused.size() && i < 5; ++i) names += (i ? ", " : "") + unused[i];
            if (unused.size() > 5) names += ", ...";
            fail(ACCEL_ERR_FAILED_PRECONDITION,
                 "ddp: " + std::to_string(unused.size()) + " parameter(s) received no gradient in this backward (" +
                     names + "); set kwargs_handlers.ddp.find_unused_parameters to true when the forward does not "
                     "use every parameter");
        }
        for (size_t i = 0; i < params.size(); ++i)
            if (!ready[i]) mark_ready(i, false);
        if (join) launch_announced();
        double last_done = 0.0, busy = 0.0;
        for (auto &b : buckets) {
            try {
                b.work->wait();
            } catch (...) {
                active = false;
                throw;
            }
            // Time with at least one bucket in flight (buckets launch in order): what the all-reduces
            // themselves took, without the backward compute between two launches.
            const double done = b.work->completed_at();
            profiling::record_interval(profiling::kBucketAllReduce, b.launched_at, done); // its time in flight
            busy += std::max(0.0, done - std::max(b.launched_at, last_done));
            last_done = std::max(last_done, done);
            if (compress) b.flat.copy_(b.wire);
        }
        for (auto &p : params) {
            at::Tensor &grad = p.tensor.mutable_grad();
            at::Tensor view = view_of(p);
            if (kw.gradient_as_bucket_view) {
                if (!grad.defined() || grad.data_ptr() != view.data_ptr()) grad = view;
            } else if (grad.defined()) {
                grad.copy_(view);
            } else {
                grad = view.clone();
            }
        }
        active = false;
        const double t1 = distributed::now_seconds();
        stats.syncs += 1;
        stats.sync_seconds += std::max(0.0, std::max(last_done, t0) - first_launch);
        stats.wait_seconds += t1 - t0;
        stats.busy_seconds += busy;
    }
};

DistributedDataParallel::DistributedDataParallel(std::vector<std::pair<std::string, at::Tensor>> parameters,
                                                 std::vector<std::pair<std::string, at::Tensor>> buffers,
                                                 std::shared_ptr<distributed::Communicator> comm,
                                                 const config::DistributedDataParallelKwargs &kwargs)
    : impl_(std::make_shared<Impl>())
{
    Impl &s = *impl_;
    s.comm = std::move(comm);
    s.kw = kwargs;
    s.buffers = std::move(buffers);
    if (kwargs.comm_hook == "fp16") {
        s.compress = true;
        s.wire_dtype = at::kHalf;
    } else if (kwargs.comm_hook == "bf16") {
        if (std::string(s.comm->backend()) == "gloo")
            fail(ACCEL_ERR_UNIMPLEMENTED, "kwargs_handlers.ddp.comm_hook: \"bf16\" needs a backend that reduces bfloat16, "
                                          "and Gloo (LibTorch 1.13) does not; use \"fp16\" or the mpi backend");
        s.compress = true;
        s.wire_dtype = at::kBFloat16;
    }
    at::NoGradGuard no_grad;
    for (auto &np : parameters) s.all_params.push_back(np.second);
    for (auto &np : parameters)
        if (np.second.requires_grad()) {
            if (!np.second.is_leaf())
                fail(ACCEL_ERR_INVALID_ARGUMENT, "ddp: parameter " + np.first + " is not a leaf tensor");
            Impl::Param p;
            p.name = np.first;
            p.tensor = np.second;
            p.numel = np.second.numel();
            s.params.push_back(std::move(p));
        }

    // Parameters are broadcast from rank 0 so that every rank starts from the same weights: frozen ones too
    // (DDP's _sync_module_states sends the whole state dict), which no gradient reduction would ever align;
    // buffers too, whatever broadcast_buffers says.
    s.sync_state_from(0);

    // Buckets in reverse registration order (roughly the order backward produces gradients).
    const int64_t cap = kwargs.bucket_cap_mb * 1024 * 1024;
    std::vector<std::vector<size_t>> groups;
    int64_t bytes = 0;
    at::ScalarType dtype = at::kFloat;
    for (size_t k = s.params.size(); k-- > 0;) {
        const at::Tensor &t = s.params[k].tensor;
        if (groups.empty() || (bytes >= (groups.size() == 1 ? kFirstBucketBytes : cap)) || t.scalar_type() != dtype) {
            groups.emplace_back();
            bytes = 0;
            dtype = t.scalar_type();
        }
        groups.back().push_back(k);
        bytes += t.numel() * static_cast<int64_t>(t.element_size());
    }
    for (auto &g : groups) {
        Impl::Bucket b;
        int64_t n = 0;
        for (size_t k : g) {
            s.params[k].bucket = s.buckets.size();
            s.params[k].offset = n;
            n += s.params[k].numel;
        }
        b.flat = at::zeros({n}, s.params[g[0]].tensor.options().requires_grad(false));
        b.params = g;
        s.stats.bucket_sizes.push_back(n * static_cast<int64_t>(s.compress ? 2 : b.flat.element_size()));
        s.stats.bucket_bytes += s.stats.bucket_sizes.back();
        s.buckets.push_back(std::move(b));
    }
    s.stats.num_buckets = static_cast<int64_t>(s.buckets.size());
    s.ready.assign(s.params.size(), false);

    // One post hook per gradient accumulator: the parameter's gradient is final for this backward.
    std::weak_ptr<Impl> weak = impl_;
    for (size_t i = 0; i < s.params.size(); ++i) {
        auto acc = torch::autograd::impl::grad_accumulator(s.params[i].tensor);
        if (!acc) fail(ACCEL_ERR_INTERNAL, "ddp: parameter " + s.params[i].name + " has no gradient accumulator");
        acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [weak, i](const torch::autograd::variable_list &outputs, const torch::autograd::variable_list &) {
                if (auto impl = weak.lock())
                    if (impl->require_sync) {
                        at::NoGradGuard no_grad;
                        impl->mark_ready(i, true);
                    }
                return outputs;
            }));
        s.accumulators.push_back(std::move(acc));
    }
}

DistributedDataParallel::~DistributedDataParallel() = default;

void DistributedDataParallel::set_require_sync(bool on) { impl_->require_sync = on; }
bool DistributedDataParallel::require_sync() const { return impl_->require_sync; }
void DistributedDataParallel::finish_backward() { impl_->finish(); }

void DistributedDataParallel::abort_backward()
{
    for (auto &b : impl_->buckets)
        if (b.work) {
            try {
                b.work->wait();
            } catch (...) {
            }
            b.work.reset();
        }
    impl_->active = false;
}
DdpStats DistributedDataParallel::stats() const { return impl_->stats; }

double DistributedDataParallel::clip_grad_norm(double max_norm, double norm_type, bool clip)
{
    return whole_clip_grad_norm(impl_->all_params, max_norm, norm_type, clip);
}

void DistributedDataParallel::clip_grad_value(double clip_value) { whole_clip_grad_value(impl_->all_params, clip_value); }

WrapperMemory DistributedDataParallel::memory() const
{
    WrapperMemory m = whole_memory(impl_->all_params);
    m.ddp_bucket_bytes = impl_->stats.bucket_bytes;
    return m;
}

void DistributedDataParallel::broadcast_buffers()
{
    if (!impl_->kw.broadcast_buffers) return;
    // Inside join_uneven_inputs rank 0 may have run out of batches: the lowest rank with batches sends.
    const int32_t root = impl_->join ? impl_->join->notify(impl_->join_index, Join::Op::Buffers) : 0;
    impl_->sync_buffers_from(root);
}

void DistributedDataParallel::set_join(std::shared_ptr<Join> join, size_t index)
{
    impl_->join = std::move(join);
    impl_->join_index = index;
    impl_->hold_launches = impl_->join != nullptr;
}

void DistributedDataParallel::broadcast_buffers_from(int32_t root)
{
    if (impl_->kw.broadcast_buffers) impl_->sync_buffers_from(root);
}

void DistributedDataParallel::shadow_gradients()
{
    at::NoGradGuard no_grad;
    for (auto &b : impl_->buckets) {
        // What a rank with batches sends for this bucket (its wire dtype), all zeros.
        at::Tensor zeros = at::zeros_like(b.flat, impl_->compress ? impl_->wire_dtype : b.flat.scalar_type());
        impl_->comm->allreduce(zeros, distributed::ReduceOp::Sum);
    }
}

void DistributedDataParallel::broadcast_state_from(int32_t root) { impl_->sync_state_from(root); }

} // namespace accel::parallel
