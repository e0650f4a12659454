#include "parallel/fsdp/sharded_data_parallel.hpp"

#include "parallel/fsdp/collective_queue.hpp"
#include "parallel/fsdp/frozen_shards.hpp"
#include "parallel/fsdp/param_offload.hpp"
#include "parallel/fsdp/storage.hpp"
#include "parallel/fsdp/zero_init.hpp"

#include "common/allocator.hpp"
#include "common/error.hpp"
#include "distributed/collective_tracker.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "model/model.hpp"

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

namespace accel::parallel {

namespace {

// DeepSpeed's defaults for the zero_optimization sizes accel honours, in elements (sharding-and-parallelism.md
// §2): what a size that is absent or "auto" means.
constexpr int64_t kDeepSpeedReduceBucketSize = 500000000, kDeepSpeedAllgatherBucketSize = 500000000,
                  kDeepSpeedPrefetchBucketSize = 50000000, kDeepSpeedMaxLiveParameters = 1000000000,
                  kDeepSpeedMaxReuseDistance = 1000000000;

int64_t size_or(const config::ShardingConfig::DeepSpeedSize &d, int64_t def) { return d.given() ? d.value : def; }

at::ScalarType dtype_named(const std::string &name) { return name == "bfloat16" ? at::kBFloat16 : at::kFloat; }

// All-gather that moves 16-bit floats as bytes: the bytes are the same, and every backend moves uint8
// (Gloo in LibTorch 1.13 handles neither bfloat16 nor int16).
std::vector<at::Tensor> allgather_bits(distributed::Communicator &c, const at::Tensor &t)
{
    // An empty flat (a pipeline stage's unit whose frozen parameters all live on another stage) is empty on every
    // rank of the group, which skips the call alike: Gloo's allgather divides by the size and dies on SIGFPE.
    if (t.numel() == 0) return std::vector<at::Tensor>(static_cast<size_t>(c.size()), t);
    if (t.element_size() != 2 || !t.is_floating_point()) return c.allgather(t);
    std::vector<at::Tensor> parts = c.allgather(t.contiguous().view(at::kByte));
    for (auto &part : parts) part = part.view(t.scalar_type());
    return parts;
}

// Sum all-reduce for any dtype the engine reduces in. Gloo (LibTorch 1.13) cannot reduce bfloat16, so there
// it is accel's ring reduce-scatter (which adds in the tensor's dtype, as NCCL does) and an all-gather.
void allreduce_sum(distributed::Communicator &c, at::Tensor &t)
{
    if (t.scalar_type() != at::kBFloat16 || std::string(c.backend()) != "gloo" || c.size() == 1) {
        c.allreduce(t, distributed::ReduceOp::Sum);
        return;
    }
    const int64_t n = c.size(), padded = (t.numel() + n - 1) / n * n;
    at::Tensor in = padded == t.numel() ? t : at::cat({t, at::zeros({padded - t.numel()}, t.options())});
    at::Tensor mine = c.reduce_scatter(in, distributed::ReduceOp::Sum);
    t.copy_(at::cat(allgather_bits(c, mine)).narrow(0, 0, t.numel()));
}

} // namespace

struct ShardedDataParallel::Impl {
    struct Param {
        std::string name;
        at::Tensor tensor;
        size_t unit = 0;
        int64_t offset = 0; // in the unit's flat buffer
        int64_t numel = 0;
        bool tp_split = false; // a tensor-parallel slice (set_tensor_parallel)
    };
    struct Unit {
        std::vector<size_t> params;
        size_t first_layer = 0, last_layer = 0; // non-root units: the layers they cover
        bool root = false;
        int64_t numel = 0, padded = 0, shard_numel = 0;
        at::Tensor full;       // padded flat buffer; the parameters are views of it
        at::Tensor shard;      // this rank's slice (a view of `full` unless parameters are sharded)
        at::Tensor grad_full;  // ZeRO-0/1: the all-reduced flat gradients of the last sync
        at::Tensor grad_shard; // ZeRO-2/3: this rank's reduced gradient slice, accumulated over syncs
        at::Tensor master_full; // 16-bit parameters while summoned: the whole float32 values the parameters view
        CollectiveQueue::Ticket gathering; // its all-gather into `full`, queued (maybe ahead of use: prefetch)
        CollectiveQueue::Ticket reducing;  // its gradient reduction, running while backward goes on
        at::Tensor reduced;                // what that reduction produced (written on the queue's thread)
        bool gathered = true;              // `full` has memory (its all-gather may still be queued)
        size_t pending = 0;
        int32_t passes_left = 0; // backward passes over it still to come in this backward (set_pipeline's micro-batches)
        bool done = false; // its gradients were handled in this backward
        bool keep = false; // stays gathered from its forward to its backward (stage3_max_reuse_distance)
        std::vector<FrozenFlat> frozen; // its layer's frozen parameters, sharded: gathered and freed with it
        // With frozen parameters, the unit is freed once the gradient of its input is in (input_done), not when its
        // trainable gradients are: a frozen weight serves only the input-gradient path, which may run after every
        // trainable gradient of the unit (LoRA adapters). input_hooked: the forward hooked its input.
        bool input_hooked = false, input_done = false;
    };

    config::ShardingConfig cfg;
    // From the device mesh: the processes that share the shards (dp_shard_cp: everyone, or under HYBRID_SHARD
    // this node's); `replicas` links the shard groups' same positions (dp_replicate; null when it is one
    // process); `data` is every data-parallel process (dp_cp), which gradients are averaged over and
    // sync_module_states broadcasts to. world / rank are within `comm`, total_world is data's size.
    std::shared_ptr<distributed::Communicator> comm, replicas, data;
    // Tensor parallelism inside the engine (set_tensor_parallel): the tp group; null without.
    std::shared_ptr<distributed::Communicator> tp;
    // A pipeline stage (set_pipeline): the pp group its gradient norm is summed over, the backward passes (micro-
    // batches) of one backward, and the parameter another stage counts in the norm (the last stage's tied embedding).
    std::shared_ptr<distributed::Communicator> pp;
    int32_t passes = 1;
    at::Tensor counted_elsewhere;
    int32_t world = 1, rank = 0, total_world = 1;
    std::vector<Param> params;
    // Every trainable parameter of the model, in its order: `params`, and a pipeline stage's emptied ones (the
    // other stages', zero elements), which the optimizer holds too.
    std::vector<at::Tensor> trainable;
    std::vector<Unit> units;
    std::vector<int> unit_of_layer; // layer -> non-root unit starting or covering it (-1: root)
    std::vector<std::shared_ptr<torch::autograd::Node>> accumulators;
    bool require_sync = true;
    bool active = false;
    bool summoned = false;
    ShardedMemory mem;
    // mixed_precision_policy: the parameters (views of `full`) and the gathers are param_dtype, the shards
    // the optimizer steps are float32 masters; gradients are reduced in reduce_dtype; floating-point buffers
    // are kept in buffer_dtype (`cast_buffers`: each with its own dtype, which checkpoints and release see).
    at::ScalarType param_dtype = at::kFloat, reduce_dtype = at::kFloat, buffer_dtype = at::kFloat;
    std::vector<std::pair<at::Tensor, at::ScalarType>> cast_buffers;
    // Frozen floating-point parameters compute in param_dtype too (FSDP casts a unit's frozen parameters with
    // the rest); each keeps its own-dtype master here, which summon, release and checkpoints see.
    std::vector<std::pair<at::Tensor, at::Tensor>> cast_frozen; // (parameter, master)
    std::vector<at::Tensor> frozen; // every frozen parameter kept whole on this rank, counted in parameter_bytes
    // Sharded frozen parameters outside any unit's layer (embeddings, final norm, head): gathered before the forward
    // as the root unit is, freed when the backward is over (they need not share the root unit's existence: a LoRA
    // model's root often has no trainable parameter at all).
    std::vector<FrozenFlat> root_frozen;
    std::string key; // "fsdp_plugin" or "deepspeed_plugin", for messages
    std::unique_ptr<ParamOffload> offload; // offload_param_device other than "none"
    // DeepSpeed's buckets, in elements: consecutive units move in one collective while they fit:
    // reduce_bucket_size (gradients), allgather_bucket_size (ZeRO-1/2's gather after the step),
    // stage3_prefetch_bucket_size (ZeRO-3: the units gathered ahead of the one about to compute), all within
    // stage3_max_live_parameters. On this machine a collective's fixed cost (ms) outweighs its bytes, and
    // DeepSpeed moves buckets, not modules. FSDP moves one unit per collective (0 here).
    int64_t reduce_bucket = 0, allgather_bucket = 0, prefetch_bucket = 0, max_live = INT64_MAX;
    std::vector<Unit *> bucket; // units whose final gradients wait for the rest of their bucket
    int64_t bucket_numel = 0;

    // A unit's shard values wherever they are (in memory, or in its offload file), and setting them.
    at::Tensor shard_values(const Unit &u) const
    {
        return offload ? offload->values(static_cast<size_t>(&u - units.data()), u.shard) : u.shard.detach();
    }
    void store_shard(Unit &u, const at::Tensor &values)
    {
        if (offload) offload->store(static_cast<size_t>(&u - units.data()), u.shard, values);
        else u.shard.detach().copy_(values);
    }
    bool shard_out(const Unit &u) const { return offload && offload->out(static_cast<size_t>(&u - units.data())); }
    void page_all(bool in)
    {
        if (!offload || !offload->to_files()) return;
        at::NoGradGuard no_grad;
        for (size_t i = 0; i < units.size(); ++i)
            if (in) offload->page_in(i, units[i].shard);
            else offload->page_out(i, units[i].shard);
        note_peak();
    }

    bool low_precision() const { return param_dtype != at::kFloat; }
    // A tensor's dtype in checkpoints: a buffer cast to buffer_dtype keeps its own.
    at::ScalarType own_dtype(const at::Tensor &t) const
    {
        if (const at::Tensor *m = frozen_master(t)) return m->scalar_type();
        for (const auto &[b, dtype] : cast_buffers)
            if (b.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return dtype;
        return t.scalar_type();
    }
    const at::Tensor *frozen_master(const at::Tensor &t) const
    {
        for (const auto &[p, master] : cast_frozen)
            if (p.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) return &master;
        return nullptr;
    }
    // A tensor's values as checkpoints see them: a frozen parameter's master while it computes in param_dtype.
    at::Tensor own_value(const at::Tensor &t) const
    {
        const at::Tensor *m = frozen_master(t);
        return m ? *m : t.detach();
    }
    // The shard is a tensor of its own (not a view of the full buffer) when the full buffer is freed between
    // uses or is 16-bit.
    bool separate_shards() const { return params_sharded() || low_precision(); }

    bool params_sharded() const { return cfg.shard_parameters; }
    // NO_SHARD / ZeRO-0: one "shard" is the whole buffer.
    int32_t shard_world() const { return cfg.shard_optimizer ? world : 1; }

    void note_peak()
    {
        int64_t gathered = 0;
        for (const auto &u : units)
            if (params_sharded() && u.gathered) gathered += bytes_of(u.full);
        for_each_flat([&gathered](const FrozenFlat &f) { gathered += f.gathered ? bytes_of(f.full) : 0; });
        mem.gathered_bytes = gathered;
        mem.peak_gathered_bytes = std::max(mem.peak_gathered_bytes, gathered);
        int64_t grads = gradient_bytes();
        mem.peak_model_state_bytes = std::max(mem.peak_model_state_bytes, parameter_bytes() + grads + gathered);
    }

    int64_t parameter_bytes() const
    {
        int64_t n = 0;
        for (const auto &u : units) {
            if (!params_sharded()) n += bytes_of(u.full); // the whole (possibly 16-bit) parameters persist
            if (separate_shards() && !shard_out(u)) n += bytes_of(u.shard);
        }
        for (const auto &p : frozen) n += bytes_of(p);
        for (const auto &[p, master] : cast_frozen) n += bytes_of(master);
        for_each_flat([&n](const FrozenFlat &f) { n += bytes_of(f.shard); });
        return n;
    }

    // "nvme": the shards in files; "cpu": every parameter byte (host memory, accounted as offloaded).
    int64_t offloaded_parameter_bytes() const
    {
        if (!offload) return 0;
        if (!offload->to_files()) return parameter_bytes();
        int64_t n = 0;
        for (const auto &u : units)
            if (shard_out(u)) n += bytes_of(u.shard);
        return n;
    }

    int64_t gradient_bytes() const
    {
        int64_t n = 0;
        for (const auto &u : units) {
            n += bytes_of(u.grad_full) + bytes_of(u.grad_shard);
            for (size_t i : u.params) {
                const at::Tensor &g = params[i].tensor.grad();
                // ZeRO-0/1 gradients are views of grad_full: counted there.
                if (g.defined() && !(u.grad_full.defined() && g.storage().is_alias_of(u.grad_full.storage())))
                    n += bytes_of(g);
            }
        }
        return n;
    }

    // One all-gather for the shards of `group` into their full buffers: every rank sends its shards back to
    // back, so rank r's part of the result holds each unit's piece r in turn. 16-bit parameters are gathered as
    // 16-bit (half the bytes on the wire and in the full buffers); an offloaded shard is read from its file
    // here (on the queue's thread when prefetched). A shard that is a view of its full buffer is in place.
    void allgather_into(const std::vector<Unit *> &group)
    {
        at::NoGradGuard no_grad;
        std::vector<at::Tensor> mine;
        for (Unit *u : group) mine.push_back(shard_values(*u).to(param_dtype));
        std::vector<at::Tensor> parts = allgather_bits(*comm, mine.size() == 1 ? mine[0] : at::cat(mine));
        for (int32_t r = 0; r < world; ++r) {
            if (r == rank && !separate_shards()) continue;
            int64_t at = 0;
            for (Unit *u : group) {
                u->full.narrow(0, r * u->shard_numel, u->shard_numel).copy_(parts[r].narrow(0, at, u->shard_numel));
                at += u->shard_numel;
            }
        }
        for (Unit *u : group) // frozen parameters in their own dtype: one collective per flat
            for (FrozenFlat &f : u->frozen) fill_full(f, allgather_bits(*comm, f.shard));
    }

    template <class Fn> void for_each_flat(Fn fn) const
    {
        for (const auto &u : units)
            for (const auto &f : u.frozen) fn(f);
        for (const auto &f : root_frozen) fn(f);
    }
    template <class Fn> void for_each_flat(Fn fn)
    {
        for (auto &u : units)
            for (auto &f : u.frozen) fn(f);
        for (auto &f : root_frozen) fn(f);
    }
    // Where a sharded frozen parameter lives (null when it is not one).
    std::pair<const FrozenFlat *, size_t> flat_of(const at::Tensor &t) const
    {
        std::pair<const FrozenFlat *, size_t> out{nullptr, 0};
        for_each_flat([&](const FrozenFlat &f) {
            for (size_t i = 0; i < f.params.size(); ++i)
                if (f.params[i].unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) out = {&f, i};
        });
        return out;
    }
    // Frozen flats gathered on the training thread, behind whatever is queued (summon, the root's before forward).
    void gather_flats(std::vector<FrozenFlat> &flats)
    {
        std::vector<FrozenFlat *> need;
        for (auto &f : flats)
            if (!f.gathered) {
                allocate_full(f);
                need.push_back(&f);
            }
        if (need.empty()) return;
        note_peak();
        ++mem.all_gathers;
        queue.run([this, need] {
            at::NoGradGuard no_grad;
            for (FrozenFlat *f : need) fill_full(*f, allgather_bits(*comm, f->shard));
        });
    }
    void release_flats(std::vector<FrozenFlat> &flats)
    {
        if (summoned) return;
        note_peak();
        for (auto &f : flats) release_full(f);
    }

    // The group's all-gather; their full buffers get memory now.
    std::function<void()> gather_job(const std::vector<Unit *> &group)
    {
        for (Unit *u : group) {
            allocate_storage(u->full, bytes_of(u->full));
            u->gathered = true;
            for (FrozenFlat &f : u->frozen) allocate_full(f);
        }
        note_peak();
        ++mem.all_gathers;
        return [this, group] { allgather_into(group); };
    }

    int64_t gathered_elements() const
    {
        int64_t n = 0;
        for (const auto &u : units)
            if (u.gathered) n += u.padded;
        return n;
    }

    // Unit ui and, with a prefetch bucket, the units that compute after it in that direction (forward: +1,
    // backward: -1, 0: none) and are not gathered yet, while they fit the bucket and stage3_max_live_parameters.
    std::vector<Unit *> group_from(size_t ui, int direction)
    {
        std::vector<Unit *> group{&units[ui]};
        int64_t ahead = 0, live = gathered_elements() + units[ui].padded;
        for (size_t v = ui + direction; direction != 0 && v < units.size(); v += direction) {
            const Unit &n = units[v];
            if (n.root || (direction < 0 && n.done)) break;
            if (n.gathered) continue;
            if (ahead + n.padded > prefetch_bucket || live + n.padded > max_live) break;
            ahead += n.padded;
            live += n.padded;
            group.push_back(&units[v]);
        }
        return group;
    }

    // Prefetch: queued; gather() waits for it.
    void start_gather(size_t ui, int direction)
    {
        if (units[ui].gathered) return;
        std::vector<Unit *> group = group_from(ui, direction);
        CollectiveQueue::Ticket t = queue.submit(gather_job(group));
        for (Unit *u : group) u->gathering = t;
    }

    void gather(size_t ui, int direction = 0)
    {
        Unit &u = units[ui];
        if (u.gathered) u.gathering.wait(); // maybe prefetched
        else queue.run(gather_job(group_from(ui, direction)));
    }

    // forward_prefetch / backward_prefetch: the all-gather of the unit that computes next, queued while this
    // one computes. Units after the root are in forward order; the root stays gathered through a step.
    void prefetch(size_t ui, bool forward)
    {
        const size_t next = forward ? ui + 1 : ui - 1;
        if ((!forward && ui == 0) || next >= units.size() || units[next].root) return;
        if (!forward && units[next].done) return; // its backward is over
        // stage3_max_live_parameters bounds what is fetched ahead, never the unit about to compute (DeepSpeed
        // prefetches only up to its limit and always fetches the module it runs).
        if (!units[next].gathered && gathered_elements() + units[next].padded > max_live) return;
        start_gather(next, forward ? 1 : -1);
    }

    void reshard(Unit &u)
    {
        if (!params_sharded() || !u.gathered || summoned) return;
        u.gathering.wait(); // never free memory that a queued all-gather writes
        note_peak();
        release_storage(u.full);
        u.gathered = false;
        for (FrozenFlat &f : u.frozen) release_full(f);
    }

    void reset_backward()
    {
        bucket.clear(); // what a failed backward left unreduced
        bucket_numel = 0;
        for (auto &u : units) {
            u.pending = u.params.size();
            u.passes_left = passes;
            u.done = false;
        }
        active = true;
    }

    // One more of unit u's gradients is in. After a pass's last, the unit's gradients are final when it was the
    // last pass; before that (a pipeline stage's micro-batches) they accumulate locally and its buffer is freed
    // as after its forward, since the next pass's backward hook gathers it again. Not the root's (no hook gathers
    // it: it stays gathered through a step), nor any without reshard_after_forward (kept forward to backward).
    void gradient_in(Unit &u)
    {
        if (u.pending == 0 || --u.pending > 0) return;
        if (--u.passes_left <= 0) return unit_ready(u);
        u.pending = u.params.size();
        if (!u.root && cfg.reshard_after_forward && (!u.input_hooked || u.input_done)) reshard(u);
    }

    // Every gradient of unit u is final for this backward.
    void unit_ready(Unit &u)
    {
        if (u.done) return;
        u.done = true;
        at::NoGradGuard no_grad;
        if (require_sync) reduce(u);
        if (!u.input_hooked || u.input_done) reshard(u);
        if (cfg.backward_prefetch == "BACKWARD_POST" && active) prefetch(static_cast<size_t>(&u - units.data()), false);
    }

    // Unit u's gradients are final: they join the bucket, which is reduced once full (the next unit would not
    // fit) or when backward is over.
    void reduce(Unit &u)
    {
        if (!bucket.empty() && bucket_numel + u.padded > reduce_bucket) flush_bucket(false);
        bucket.push_back(&u);
        bucket_numel += u.padded;
        const bool last = std::all_of(units.begin(), units.end(), [](const Unit &v) { return v.done; });
        if (last || bucket_numel >= reduce_bucket) flush_bucket(last);
        note_peak();
    }

    // The gradients of `group`, averaged over every process (as DDP: divide, then sum), in reduce_dtype, laid out
    // for one collective: each unit's flat gradients back to back (all-reduce), or, for the reduce-scatter that
    // hands rank r the r-th of `world` equal chunks, chunk r holding each unit's piece r in turn. Written in
    // place (no per-unit copy first); a rank keeps only its shard of sharded gradients, so those are dropped.
    at::Tensor bucket_input(const std::vector<Unit *> &group)
    {
        const bool scatter = cfg.shard_gradients;
        int64_t row = 0, total = 0;
        for (Unit *u : group) {
            row += u->shard_numel;
            total += u->padded;
        }
        at::Tensor in = at::zeros({total}, group[0]->full.options().dtype(reduce_dtype));
        int64_t col = 0, base = 0; // where the unit starts in each chunk (scatter) or in the whole (all-reduce)
        for (Unit *u : group) {
            const int64_t s = u->shard_numel;
            for (size_t i : u->params) {
                const Param &p = params[i];
                const at::Tensor &g = p.tensor.grad();
                if (!g.defined()) continue;
                const at::Tensor flat = g.reshape({-1});
                if (!scatter) {
                    in.narrow(0, base + p.offset, p.numel).copy_(flat);
                    continue;
                }
                for (int64_t lo = p.offset, end = p.offset + p.numel; lo < end;) { // the pieces it spans
                    const int64_t r = lo / s, hi = std::min(end, (r + 1) * s);
                    in.narrow(0, r * row + col + lo - r * s, hi - lo).copy_(flat.narrow(0, lo - p.offset, hi - lo));
                    lo = hi;
                }
            }
            if (scatter)
                for (size_t i : u->params) params[i].tensor.mutable_grad().reset();
            col += s;
            base += u->padded;
        }
        return in.div_(total_world);
    }

    // The bucket's reduction. It runs on the queue while backward computes the next units (the last bucket, with
    // nothing left to overlap, on this thread); complete_reduce() takes each unit's part of the result.
    void flush_bucket(bool last)
    {
        std::vector<Unit *> group = std::move(bucket);
        bucket.clear();
        bucket_numel = 0;
        ++mem.reductions;
        std::function<void()> job = [this, group, in = bucket_input(group)]() mutable {
            at::NoGradGuard no_grad;
            at::Tensor g;
            if (cfg.shard_gradients) {
                g = comm->reduce_scatter(in, distributed::ReduceOp::Sum);
                in = at::Tensor();
                if (replicas) allreduce_sum(*replicas, g); // the other nodes' sums of these pieces
            } else {
                allreduce_sum(*comm, in);
                g = std::move(in);
                // NO_SHARD / ZeRO-1 under dp_replicate > 1 (parallelism_config): the replicas' sums too.
                if (replicas) allreduce_sum(*replicas, g);
            }
            g = g.to(at::kFloat); // the master shards' gradients are float32 whatever was reduced
            int64_t at = 0;
            for (Unit *u : group) {
                const int64_t n = cfg.shard_gradients ? u->shard_numel : u->padded;
                u->reduced = g.narrow(0, at, n);
                at += n;
            }
        };
        if (last) {
            queue.run(std::move(job));
            return;
        }
        CollectiveQueue::Ticket t = queue.submit(std::move(job));
        for (Unit *u : group) u->reducing = t;
    }

    // On the training thread, once unit u's reduction is done: its result becomes the gradient the
    // optimizer steps.
    void complete_reduce(Unit &u)
    {
        u.reducing.wait();
        if (!u.reduced.defined()) return;
        at::Tensor g = std::move(u.reduced);
        u.reduced = at::Tensor();
        if (cfg.shard_gradients) {
            if (u.grad_shard.defined()) u.grad_shard.add_(g);
            else u.grad_shard = g;
            u.shard.mutable_grad() = u.grad_shard;
            return;
        }
        // As DDP's gradient_as_bucket_view: the parameters' gradients are views of the reduced buffer.
        // 16-bit parameters have none: their gradient is the float32 master's.
        for (size_t i : u.params) {
            Param &p = params[i];
            if (low_precision()) p.tensor.mutable_grad().reset();
            else p.tensor.mutable_grad() = g.narrow(0, p.offset, p.numel).view(p.tensor.sizes());
        }
        u.grad_full = g;
        u.shard.mutable_grad() = g.narrow(0, rank_in_shard() * u.shard_numel, u.shard_numel);
    }

    // Waits for everything queued (in order), completing the reductions; the first failure is rethrown
    // once all are done, so nothing is left running against memory that is about to change.
    void drain()
    {
        std::exception_ptr error;
        for (auto &u : units) {
            try {
                u.gathering.wait();
                complete_reduce(u);
            } catch (...) {
                if (!error) error = std::current_exception();
            }
        }
        if (error) std::rethrow_exception(error);
    }

    int32_t rank_in_shard() const { return shard_world() == 1 ? 0 : rank; }

    // One post hook per gradient accumulator: when a unit's last gradient is in, reduce and free it. Again
    // after a parameter's dtype changed (set_data then drops its accumulator).
    void install_gradient_hooks(const std::weak_ptr<Impl> &weak)
    {
        accumulators.clear();
        for (size_t i = 0; i < params.size(); ++i) {
            auto acc = torch::autograd::impl::grad_accumulator(params[i].tensor);
            if (!acc) fail(ACCEL_ERR_INTERNAL, key + ": parameter " + params[i].name + " has no gradient accumulator");
            acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
                [weak, i](const torch::autograd::variable_list &outputs, const torch::autograd::variable_list &) {
                    if (auto impl = weak.lock()) {
                        distributed::CollectivePurpose purpose(distributed::kShardedBackward);
                        if (!impl->active) impl->reset_backward();
                        impl->gradient_in(impl->units[impl->params[i].unit]);
                    }
                    return outputs;
                }));
            accumulators.push_back(std::move(acc));
        }
    }

    // Makes the parameters views of `flat` (the unit's full buffer, or its float32 master while summoned).
    void point_parameters(Unit &u, const at::Tensor &flat)
    {
        for (size_t k : u.params) {
            Param &p = params[k];
            p.tensor.set_data(flat.narrow(0, p.offset, p.numel).view(p.tensor.sizes()));
        }
    }

    void cast_buffers_to(bool own_dtype)
    {
        for (auto &[b, dtype] : cast_buffers) b.set_data(b.detach().to(own_dtype ? dtype : buffer_dtype));
        // Own: the parameter is its master (writes while summoned land there); else a param_dtype copy of it.
        for (auto &[p, master] : cast_frozen) p.set_data(own_dtype ? master : master.to(param_dtype));
    }

    // 16-bit parameters, summoned: the float32 masters joined whole (collective when they are sharded) and
    // the parameters pointed at them, so that reads, writes and checkpoints see float32.
    void summon_master(Unit &u)
    {
        u.master_full = at::empty({u.padded}, u.shard.options().requires_grad(false));
        if (shard_world() == 1) u.master_full.copy_(shard_values(u));
        else {
            std::vector<at::Tensor> parts = comm->allgather(shard_values(u));
            for (int32_t r = 0; r < world; ++r) u.master_full.narrow(0, r * u.shard_numel, u.shard_numel).copy_(parts[r]);
        }
        point_parameters(u, u.master_full);
    }

    // The end of summon_master: writes reach this rank's master shard and the persistent 16-bit copy.
    void unsummon_master(Unit &u)
    {
        store_shard(u, u.master_full.narrow(0, rank_in_shard() * u.shard_numel, u.shard_numel));
        if (!params_sharded()) u.full.copy_(u.master_full);
        // Views of a freed buffer cannot be made (LibTorch checks them against the storage's size): give it
        // memory for the moment.
        const bool freed = !u.gathered;
        if (freed) allocate_storage(u.full, bytes_of(u.full));
        point_parameters(u, u.full);
        if (freed) release_storage(u.full);
        u.master_full = at::Tensor();
    }

    // The gradient of unit ui's input is in: its backward has run whole.
    void input_grad_done(size_t ui)
    {
        Unit &u = units[ui];
        u.input_done = true;
        if (u.done) reshard(u);
    }

    void finish()
    {
        if (!active) return;
        at::NoGradGuard no_grad;
        active = false; // no more prefetching
        for (auto &u : units) unit_ready(u); // parameters unused in this backward: zero gradients
        drain();
        for (auto &u : units) {
            reshard(u); // prefetched for a backward that did not need them (or never hooked: frozen parameters)
            u.input_hooked = false;
        }
        release_flats(root_frozen);
        note_peak();
    }

    // hf_ds_config's sizes against the units, before anything of the model changes: stage3_max_reuse_distance
    // and stage3_max_live_parameters decide which units stay gathered between their forward and backward.
    void apply_deepspeed_sizes()
    {
        const int32_t sw = shard_world();
        std::vector<int64_t> padded(units.size(), 0);
        for (size_t ui = 0; ui < units.size(); ++ui) {
            int64_t n = 0;
            for (size_t k : units[ui].params) n += params[k].numel;
            padded[ui] = (n + sw - 1) / sw * sw;
        }
        // Bucket sizes below a unit need no check: a unit larger than its bucket moves alone, as DeepSpeed moves
        // a parameter larger than its bucket, and a positive prefetch bucket fetches at least the next unit, as
        // DeepSpeed fetches at least one parameter ahead.
        // sub_group_size needs no check either: the optimizer steps a shard in pieces of at most that many.
        if (cfg.zero_stage < 3) return; // the stage3_* sizes are ZeRO-3's
        // The most elements gathered at once without fetching ahead or keeping: the root and, in backward, the
        // unit computing and the one after it (its gradients may still be accumulating); prefetching, the one
        // before it too. stage3_max_live_parameters below that only stops prefetching and keeping: a unit is
        // gathered when it computes, whatever the limit, as DeepSpeed fetches a module's parameters.
        const size_t run = cfg.forward_prefetch ? 3 : 2;
        int64_t root = 0, window = 0;
        for (size_t ui = 0; ui < units.size(); ++ui) {
            if (units[ui].root) {
                root += padded[ui];
                continue;
            }
            int64_t sum = 0;
            for (size_t v = ui; v < units.size() && v < ui + run && !units[v].root; ++v) sum += padded[v];
            window = std::max(window, sum);
        }
        // From the last unit back: between a unit's forward and its backward every later unit is gathered twice.
        // Absent or "auto": DeepSpeed's defaults (1e9 both: a model below that stays gathered in between).
        const int64_t reuse = size_or(cfg.max_reuse_distance, kDeepSpeedMaxReuseDistance);
        const int64_t budget = size_or(cfg.max_live_parameters, kDeepSpeedMaxLiveParameters);
        int64_t later = 0, kept = 0;
        for (size_t ui = units.size(); ui-- > 0;) {
            if (units[ui].root) continue;
            if (2 * later <= reuse && kept + padded[ui] + root + window <= budget) {
                units[ui].keep = true;
                kept += padded[ui];
            }
            later += padded[ui];
        }
    }

    // Last member: destroyed first, running what is queued while everything it uses still exists.
    CollectiveQueue queue;
};

namespace {

// The forward hooks installed on the model: gather before a unit computes, free after.
class Hooks final : public ForwardHooks {
public:
    explicit Hooks(std::weak_ptr<ShardedDataParallel::Impl> impl) : impl_(std::move(impl)) {}

    at::Tensor before_forward(const at::Tensor &input) override
    {
        distributed::CollectivePurpose purpose(distributed::kShardedForward); // named in mismatch errors
        auto s = lock();
        for (size_t ui = 0; ui < s->units.size(); ++ui)
            if (s->units[ui].root) s->gather(ui);
        s->gather_flats(s->root_frozen);
        // FSDP's cast_forward_inputs: floating-point inputs meet the 16-bit parameters in their dtype (not while
        // summoned: the parameters are their float32 masters then, e.g. a later pipeline stage's in generation).
        return s->low_precision() && !s->summoned && input.is_floating_point() ? input.to(s->param_dtype) : input;
    }
    void before_layer(size_t layer) override
    {
        distributed::CollectivePurpose purpose(distributed::kShardedForward);
        auto s = lock();
        if (layer < s->unit_of_layer.size() && s->unit_of_layer[layer] >= 0) {
            const size_t ui = static_cast<size_t>(s->unit_of_layer[layer]);
            auto &u = s->units[ui];
            if (u.first_layer == layer) {
                s->gather(ui, 1);
                if (s->cfg.forward_prefetch) s->prefetch(ui, true);
            }
        }
    }
    at::Tensor after_layer(size_t layer, const at::Tensor &out) override
    {
        auto s = lock();
        hook_next_input(*s, layer, out);
        if (layer >= s->unit_of_layer.size() || s->unit_of_layer[layer] < 0) return out;
        const size_t ui = static_cast<size_t>(s->unit_of_layer[layer]);
        auto &u = s->units[ui];
        if (u.last_layer != layer || !s->params_sharded()) return out;
        const bool backward_follows = out.requires_grad();
        if (!backward_follows) {
            s->reshard(u);
        } else if (s->cfg.reshard_after_forward) {
            // Gather again when the gradient of this unit's output arrives, i.e. just before its backward
            // (nothing to gather for a unit kept since its forward; the hook still prefetches the next).
            std::weak_ptr<ShardedDataParallel::Impl> weak = impl_;
            out.register_hook([weak, ui](const at::Tensor &) {
                if (auto impl = weak.lock()) {
                    distributed::CollectivePurpose purpose(distributed::kShardedBackward);
                    if (!impl->active) impl->reset_backward(); // the first hook of a backward
                    impl->gather(ui, -1);
                    if (impl->cfg.backward_prefetch == "BACKWARD_PRE") impl->prefetch(ui, false);
                }
            });
            if (!u.keep) s->reshard(u);
        }
        return out;
    }
    at::Tensor after_forward(const at::Tensor &out) override
    {
        auto s = lock();
        if (!out.requires_grad()) { // no backward follows: back to shards
            s->drain();
            for (auto &u : s->units) s->reshard(u);
            s->release_flats(s->root_frozen);
        }
        // Outputs are float32, as under Accelerate's mixed precision (convert_outputs_to_fp32): losses and
        // metrics are computed as without sharding.
        return s->low_precision() && out.is_floating_point() && out.scalar_type() != at::kFloat ? out.to(at::kFloat) : out;
    }
    void check_access(const char *what) const override
    {
        auto s = impl_.lock();
        if (!s || !s->params_sharded() || s->summoned) return;
        bool whole = true;
        for (const auto &u : s->units) whole = whole && u.gathered;
        for (const auto &f : s->root_frozen) whole = whole && f.gathered;
        if (!whole)
            fail(ACCEL_ERR_FAILED_PRECONDITION,
                 std::string(what) + ": the model's parameters are sharded across processes (" + s->cfg.strategy +
                     "); call accel_accelerator_summon_full_params_begin (on every process) to read or write them");
    }

private:
    // `out` is the input of the unit starting at layer + 1: a unit with frozen parameters is freed when its
    // gradient arrives. Not while recomputing (activation checkpointing) for a unit whose backward is over.
    void hook_next_input(ShardedDataParallel::Impl &s, size_t layer, const at::Tensor &out)
    {
        if (!out.requires_grad() || layer + 1 >= s.unit_of_layer.size() || s.unit_of_layer[layer + 1] < 0) return;
        const size_t next = static_cast<size_t>(s.unit_of_layer[layer + 1]);
        auto &n = s.units[next];
        if (n.frozen.empty() || n.first_layer != layer + 1 || (s.active && n.done)) return;
        n.input_hooked = true;
        n.input_done = false;
        std::weak_ptr<ShardedDataParallel::Impl> weak = impl_;
        out.register_hook([weak, next](const at::Tensor &) {
            if (auto impl = weak.lock()) impl->input_grad_done(next);
        });
    }

    std::shared_ptr<ShardedDataParallel::Impl> lock() const
    {
        auto s = impl_.lock();
        if (!s) fail(ACCEL_ERR_FAILED_PRECONDITION, "model: its sharding engine is gone (the accelerator was freed)");
        return s;
    }
    std::weak_ptr<ShardedDataParallel::Impl> impl_;
};

const char *frontend_key(const config::ShardingConfig &c)
{
    return c.frontend == "deepspeed" ? "deepspeed_plugin" : "fsdp_plugin";
}

// hf_ds_config's "auto" sizes as Accelerate fills them from the model's hidden size h (sharding-and-parallelism.md
// §2.2): reduce_bucket_size h², stage3_prefetch_bucket_size int(0.9 h²), stage3_param_persistence_threshold 10 h.
// Without a hidden size (accel's MLP and sequential models) "auto" keeps DeepSpeed's defaults, where Accelerate
// would stop with an error.
config::ShardingConfig with_auto_sizes(config::ShardingConfig c, int64_t h)
{
    if (c.frontend != "deepspeed" || h <= 0) return c;
    auto fill = [](config::ShardingConfig::DeepSpeedSize &d, int64_t v) {
        if (d.automatic) d.value = v;
    };
    const double hd = static_cast<double>(h);
    fill(c.reduce_bucket_size, h * h);
    fill(c.prefetch_bucket_size, static_cast<int64_t>(0.9 * hd * hd));
    fill(c.param_persistence_threshold, 10 * h);
    return c;
}

} // namespace

distributed::MeshShape sharded_mesh_shape(const config::ShardingConfig &config, int32_t world)
{
    // HYBRID_SHARD: shards within a node (hybrid_group_size processes), replicas across the nodes.
    const int32_t g = config.hybrid_group_size;
    if (g > 0 && world % g != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(frontend_key(config)) + ".sharding_strategy: HYBRID_SHARD needs the " +
                                             std::to_string(world) + " processes to be whole nodes of " +
                                             std::to_string(g));
    return g > 0 ? distributed::mesh_shape(world / g, g, 1, 1) : distributed::mesh_shape(1, world, 1, 1);
}

ShardedDataParallel::ShardedDataParallel(Model &model, std::shared_ptr<distributed::Communicator> comm,
                                         const config::ShardingConfig &config)
    : ShardedDataParallel(model, distributed::DeviceMesh(sharded_mesh_shape(config, comm->size()), comm), config)
{
}

ShardedDataParallel::ShardedDataParallel(Model &model, const distributed::DeviceMesh &mesh,
                                         const config::ShardingConfig &given)
    : impl_(std::make_shared<Impl>())
{
    using distributed::MeshDim;
    const config::ShardingConfig config = with_auto_sizes(given, model.hidden_size());
    Impl &s = *impl_;
    s.cfg = config;
    s.comm = mesh.group(MeshDim::DpShardCp);
    if (mesh.size(MeshDim::DpReplicate) > 1) s.replicas = mesh.group(MeshDim::DpReplicate);
    s.data = mesh.group(MeshDim::DpCp);
    s.total_world = s.data->size();
    const std::shared_ptr<distributed::Communicator> &comm = mesh.world(); // offload file names: the process's rank
    s.world = s.comm->size();
    s.rank = s.comm->rank();
    const std::string key = frontend_key(config);
    s.key = key;
    s.param_dtype = dtype_named(config.param_dtype);
    s.reduce_dtype = dtype_named(config.reduce_dtype);
    s.buffer_dtype = dtype_named(config.buffer_dtype);
    at::NoGradGuard no_grad;

    const auto &named = model.named_parameters();
    std::vector<size_t> layer_of = model.parameter_layers();
    const std::vector<std::string> types = model.layer_types();
    // A pipeline stage's model holds the other stages' parameters emptied (zero elements): nothing to shard.
    const auto shards = [](const at::Tensor &t) { return t.requires_grad() && t.numel() > 0; };
    for (size_t i = 0; i < named.size(); ++i) {
        const at::Tensor &t = named[i].second;
        if (t.requires_grad()) s.trainable.push_back(t);
        if (!shards(t)) continue;
        if (t.scalar_type() != at::kFloat)
            fail(ACCEL_ERR_UNIMPLEMENTED, key + ": sharding needs float32 parameters; " + named[i].first + " is " +
                                              c10::toString(t.scalar_type()));
        if (!t.is_leaf()) fail(ACCEL_ERR_INVALID_ARGUMENT, key + ": parameter " + named[i].first + " is not a leaf tensor");
        Impl::Param p;
        p.name = named[i].first;
        p.tensor = t;
        p.numel = t.numel();
        s.params.push_back(std::move(p));
    }
    if (s.params.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "model: has no trainable parameters to shard");

    // Units from the wrap policy. Layers are top-level layers of the model spec.
    std::vector<size_t> param_layer;
    {
        size_t k = 0;
        for (size_t i = 0; i < named.size(); ++i)
            if (shards(named[i].second)) param_layer.push_back(layer_of.empty() ? 0 : layer_of[i]), ++k;
    }
    const std::string &policy = config.auto_wrap_policy;
    std::vector<bool> wrapped(types.size(), false);
    if (config.wrap_every_layer && !types.empty()) {
        std::vector<int64_t> layer_numel(types.size(), 0);
        for (size_t k = 0; k < s.params.size(); ++k) layer_numel[param_layer[k]] += s.params[k].numel;
        for (size_t l = 0; l < types.size(); ++l) wrapped[l] = layer_numel[l] > 0;
    } else if (policy != "NO_WRAP" && !config.wrap_every_layer) {
        if (types.empty())
            fail(ACCEL_ERR_INVALID_ARGUMENT, key + ".auto_wrap_policy: \"" + policy + "\" needs a model built from a "
                                             "JSON spec (its layers are the units); this model has no layer structure, "
                                             "use \"NO_WRAP\"");
        std::vector<int64_t> layer_numel(types.size(), 0);
        for (size_t k = 0; k < s.params.size(); ++k) layer_numel[param_layer[k]] += s.params[k].numel;
        if (policy == "TRANSFORMER_BASED_WRAP") {
            std::set<std::string> have(types.begin(), types.end());
            for (const auto &c : config.wrap_classes)
                if (have.count(c) == 0) {
                    std::string list;
                    for (const auto &t : have) list += (list.empty() ? "" : ", ") + t;
                    fail(ACCEL_ERR_INVALID_ARGUMENT, key + ".transformer_cls_names_to_wrap: the model has no layer of "
                                                     "type \"" + c + "\" (its layer types: " + list + ")");
                }
            for (size_t l = 0; l < types.size(); ++l)
                wrapped[l] = std::find(config.wrap_classes.begin(), config.wrap_classes.end(), types[l]) !=
                                 config.wrap_classes.end() && layer_numel[l] > 0;
        } else { // SIZE_BASED_WRAP: a layer becomes a unit once it has min_num_params parameters
            for (size_t l = 0; l < types.size(); ++l)
                wrapped[l] = layer_numel[l] > 0 && layer_numel[l] >= config.min_num_params;
        }
    }
    // ZeRO-3's stage3_param_persistence_threshold: DeepSpeed keeps parameters of at most that many elements
    // gathered instead of fetching them with their layer, in parameter order while their total stays within
    // stage3_model_persistence_threshold; here they join the root unit, which is gathered once before the
    // forward and stays so through the backward (their fp32 master and optimizer state stay partitioned, as
    // DeepSpeed's do). A layer left with no parameter of its own is no unit.
    std::vector<bool> persistent(s.params.size(), false);
    if (config.frontend == "deepspeed" && config.zero_stage == 3) {
        const int64_t each = config.param_persistence_threshold.value;
        const int64_t cap = config.model_persistence_threshold.given() ? config.model_persistence_threshold.value
                                                                       : INT64_MAX;
        int64_t total = 0;
        for (size_t k = 0; k < s.params.size(); ++k)
            if (s.params[k].numel <= each && s.params[k].numel <= cap - total) {
                persistent[k] = true;
                total += s.params[k].numel;
            }
    }
    auto in_root = [&](size_t k) { return types.empty() || !wrapped[param_layer[k]] || persistent[k]; };
    s.unit_of_layer.assign(types.size(), -1);
    {
        Impl::Unit root;
        root.root = true;
        for (size_t k = 0; k < s.params.size(); ++k)
            if (in_root(k)) root.params.push_back(k);
        if (!root.params.empty()) s.units.push_back(std::move(root));
        for (size_t l = 0; l < types.size(); ++l) {
            if (!wrapped[l]) continue;
            Impl::Unit u;
            u.first_layer = u.last_layer = l;
            for (size_t k = 0; k < s.params.size(); ++k)
                if (param_layer[k] == l && !in_root(k)) u.params.push_back(k);
            if (u.params.empty()) continue;
            s.unit_of_layer[l] = static_cast<int>(s.units.size());
            s.units.push_back(std::move(u));
        }
    }

    if (config.frontend == "deepspeed") {
        s.apply_deepspeed_sizes();
        // Absent or "auto": DeepSpeed's defaults (sharding-and-parallelism.md §2).
        s.reduce_bucket = size_or(config.reduce_bucket_size, kDeepSpeedReduceBucketSize);
        s.allgather_bucket = size_or(config.allgather_bucket_size, kDeepSpeedAllgatherBucketSize);
        s.prefetch_bucket = config.forward_prefetch ? size_or(config.prefetch_bucket_size, kDeepSpeedPrefetchBucketSize) : 0;
        s.max_live = size_or(config.max_live_parameters, kDeepSpeedMaxLiveParameters);
    }

    // Flat buffers: copy the parameters in, broadcast rank 0's (sync_module_states), make the
    // parameters views of their buffer, cut this rank's shard. A model built partitioned (zero3_init_flag)
    // has each parameter gathered straight into its unit's buffer: one unit whole at a time.
    const std::shared_ptr<PartitionedAtInit> partitioned = PartitionedAtInit::of(model);
    // The offload folder first: a bad offload_param_nvme_path is refused while the model is still as it was.
    std::unique_ptr<ParamOffload> offload;
    if (config.offload_param_device != "none")
        offload = std::make_unique<ParamOffload>(config.offload_param_device, config.offload_param_nvme_path,
                                                 config.offload_param_nvme_path_key, comm->rank(), s.units.size());
    const int32_t sw = s.shard_world();
    // Frozen parameters are sharded too when parameters are (frozen_shards.hpp): with the unit of their layer, or
    // with the root's flats. One that computes in a 16-bit param_dtype keeps a master of its own dtype: it stays whole.
    std::vector<std::vector<std::pair<std::string, at::Tensor>>> frozen_of_unit(s.units.size());
    std::vector<std::pair<std::string, at::Tensor>> frozen_root;
    std::set<const c10::TensorImpl *> sharded_frozen;
    if (s.params_sharded()) {
        for (size_t i = 0; i < named.size(); ++i) {
            const at::Tensor &t = named[i].second;
            if (!t.defined() || t.requires_grad() || !sharded_frozen.insert(t.unsafeGetTensorImpl()).second) continue;
            if (s.low_precision() && t.is_floating_point() && t.scalar_type() != s.param_dtype) {
                sharded_frozen.erase(t.unsafeGetTensorImpl());
                continue;
            }
            const int ui = types.empty() || layer_of.empty() ? -1 : s.unit_of_layer.at(layer_of[i]);
            (ui >= 0 ? frozen_of_unit[static_cast<size_t>(ui)] : frozen_root).emplace_back(named[i].first, t);
        }
    }
    auto fill_frozen = [&partitioned](const at::Tensor &p, const at::Tensor &dst) {
        if (partitioned && partitioned->holds(p)) partitioned->gather_into(p, dst);
        else dst.copy_(p.detach().reshape({-1}));
    };
    std::function<void(const at::Tensor &)> sync_frozen;
    if (config.sync_module_states && s.total_world > 1)
        sync_frozen = [&s](const at::Tensor &full) {
            at::Tensor bytes = full.view(at::kByte); // Gloo moves no bfloat16; the bytes are the same
            s.data->broadcast(bytes, 0);
        };
    for (size_t ui = 0; ui < s.units.size(); ++ui) {
        Impl::Unit &u = s.units[ui];
        for (size_t k : u.params) {
            s.params[k].unit = ui;
            s.params[k].offset = u.numel;
            u.numel += s.params[k].numel;
        }
        u.padded = (u.numel + sw - 1) / sw * sw;
        u.shard_numel = u.padded / sw;
        s.mem.padding_elements += u.padded - u.numel;
        u.full = at::zeros({u.padded}, s.params[u.params[0]].tensor.options().requires_grad(false));
        for (size_t k : u.params) {
            auto &p = s.params[k];
            at::Tensor dst = u.full.narrow(0, p.offset, p.numel);
            if (partitioned && partitioned->holds(p.tensor)) partitioned->gather_into(p.tensor, dst);
            else dst.copy_(p.tensor.detach().reshape({-1}));
        }
        if (config.sync_module_states && s.total_world > 1) s.data->broadcast(u.full, 0);
        at::Tensor slice = u.full.narrow(0, s.rank_in_shard() * u.shard_numel, u.shard_numel);
        u.shard = s.separate_shards() ? slice.clone() : slice;
        if (s.low_precision()) u.full = u.full.to(s.param_dtype); // the 16-bit copy the model computes with
        s.point_parameters(u, u.full);
        u.shard.requires_grad_(true);
        if (config.shard_parameters) {
            release_storage(u.full);
            u.gathered = false;
        }
        if (!frozen_of_unit[ui].empty())
            u.frozen = pack_frozen(frozen_of_unit[ui], sw, s.rank_in_shard(), fill_frozen, sync_frozen);
        // Built partitioned so that the whole model never is in memory: what this unit's gather freed goes
        // back at once (the tuned allocator would keep it, and the next units would not fit in its holes).
        if (partitioned) return_free_memory();
    }
    if (!frozen_root.empty()) s.root_frozen = pack_frozen(frozen_root, sw, s.rank_in_shard(), fill_frozen, sync_frozen);
    if (partitioned) partitioned->restore_all(); // frozen parameters kept whole: whole, as without the flag
    // Frozen parameters kept whole on every rank (parameters not sharded: no gradient, no shard, no optimizer
    // state, use_orig_params' mixed units) are sent by sync_module_states as buffers are.
    if (config.sync_module_states && s.total_world > 1)
        for (const auto *list : {&model.named_parameters(), &model.named_buffers()})
            for (const auto &[name, tensor] : *list) {
                if (!tensor.defined() || (list == &model.named_parameters() && tensor.requires_grad()) ||
                    sharded_frozen.count(tensor.unsafeGetTensorImpl()) != 0)
                    continue;
                at::Tensor t = tensor.detach().contiguous();
                s.data->broadcast(t, 0);
                if (t.data_ptr() != tensor.data_ptr()) tensor.detach().copy_(t);
            }
    if (s.buffer_dtype != at::kFloat) {
        std::set<const c10::TensorImpl *> seen;
        for (const auto &b : model.named_buffers())
            if (b.second.defined() && b.second.is_floating_point() && b.second.scalar_type() != s.buffer_dtype &&
                seen.insert(b.second.unsafeGetTensorImpl()).second)
                s.cast_buffers.emplace_back(b.second, b.second.scalar_type());
    }
    {
        std::set<const c10::TensorImpl *> seen;
        for (const auto &[name, p] : model.named_parameters()) {
            if (p.requires_grad() || !p.defined() || !seen.insert(p.unsafeGetTensorImpl()).second ||
                sharded_frozen.count(p.unsafeGetTensorImpl()) != 0)
                continue;
            s.frozen.push_back(p);
            if (s.low_precision() && p.is_floating_point() && p.scalar_type() != s.param_dtype)
                s.cast_frozen.emplace_back(p, p.detach());
        }
    }
    s.cast_buffers_to(false);
    if (offload) {
        // The shards go to their files now (nvme): from here on they are read from there.
        s.offload = std::move(offload);
        s.page_all(false);
    }
    s.mem.num_units = static_cast<int64_t>(s.units.size());
    s.install_gradient_hooks(impl_);
    model.forward_hooks = std::make_shared<Hooks>(impl_);
    s.note_peak();
}

ShardedDataParallel::~ShardedDataParallel() = default;

void ShardedDataParallel::set_require_sync(bool on) { impl_->require_sync = on; }

void ShardedDataParallel::finish_backward()
{
    distributed::CollectivePurpose purpose(distributed::kShardedBackward);
    impl_->finish();
}

void ShardedDataParallel::set_pipeline(std::shared_ptr<distributed::Communicator> pp, int32_t passes,
                                       at::Tensor counted_elsewhere)
{
    if (passes < 1) fail(ACCEL_ERR_INTERNAL, "sharding: a backward of " + std::to_string(passes) + " passes");
    impl_->pp = std::move(pp);
    impl_->passes = passes;
    impl_->counted_elsewhere = std::move(counted_elsewhere);
}

void ShardedDataParallel::reduce_accumulated()
{
    distributed::CollectivePurpose purpose(distributed::kShardedBackward);
    Impl &s = *impl_;
    const bool sync = s.require_sync;
    s.require_sync = true;
    try {
        s.reset_backward(); // a synchronised backward in which no gradient arrives: every unit reduced as it stands
        s.finish();
    } catch (...) {
        s.require_sync = sync;
        throw;
    }
    s.require_sync = sync;
}

bool ShardedDataParallel::reduction_depends_on_layout() const
{
    const Impl &s = *impl_;
    return s.comm->size() > 2 || (s.replicas && s.replicas->size() > 2);
}

namespace {

// `param`'s entry in the engine, INTERNAL when it has none (a caller's bug, not the user's).
size_t param_index(const std::vector<ShardedDataParallel::Impl::Param> &params, const at::Tensor &param)
{
    for (size_t i = 0; i < params.size(); ++i)
        if (params[i].tensor.is_same(param)) return i;
    fail(ACCEL_ERR_INTERNAL, "sharding: a parameter the engine does not hold");
}

} // namespace

at::Tensor ShardedDataParallel::reduced_gradient(const at::Tensor &param)
{
    Impl &s = *impl_;
    s.drain();
    at::NoGradGuard no_grad;
    const Impl::Param &p = s.params[param_index(s.params, param)];
    const Impl::Unit &u = s.units[p.unit];
    if (u.grad_full.defined()) return u.grad_full.narrow(0, p.offset, p.numel).view(param.sizes()).clone();
    if (!u.grad_shard.defined()) fail(ACCEL_ERR_INTERNAL, "sharding: " + p.name + " has no reduced gradient");
    const int64_t lo = s.rank_in_shard() * u.shard_numel;
    const int64_t a = std::max(lo, p.offset), b = std::min(lo + u.shard_numel, p.offset + p.numel);
    at::Tensor whole = at::zeros({p.numel}, u.grad_shard.options());
    if (b > a) whole.narrow(0, a - p.offset, b - a).copy_(u.grad_shard.narrow(0, a - lo, b - a));
    if (s.shard_world() > 1) s.comm->allreduce(whole, distributed::ReduceOp::Sum); // x + 0 + 0 == x
    return whole.view(param.sizes());
}

void ShardedDataParallel::set_reduced_gradient(const at::Tensor &param, const at::Tensor &whole)
{
    Impl &s = *impl_;
    s.drain();
    at::NoGradGuard no_grad;
    const Impl::Param &p = s.params[param_index(s.params, param)];
    Impl::Unit &u = s.units[p.unit];
    const at::Tensor flat = whole.reshape({-1});
    if (u.grad_full.defined()) {
        u.grad_full.narrow(0, p.offset, p.numel).copy_(flat);
        return;
    }
    if (!u.grad_shard.defined()) fail(ACCEL_ERR_INTERNAL, "sharding: " + p.name + " has no reduced gradient");
    const int64_t lo = s.rank_in_shard() * u.shard_numel;
    const int64_t a = std::max(lo, p.offset), b = std::min(lo + u.shard_numel, p.offset + p.numel);
    if (b > a) u.grad_shard.narrow(0, a - lo, b - a).copy_(flat.narrow(0, a - p.offset, b - a));
}

void ShardedDataParallel::abort_backward()
{
    // The collectives of a failed backward cannot be matched any more; forget it. What was queued runs (the
    // other processes queued the same); units stay as they are (gathered ones are freed on the next reshard).
    impl_->active = false;
    try {
        impl_->drain();
    } catch (...) {
    }
}

std::vector<at::Tensor> ShardedDataParallel::optimizer_params() const
{
    std::vector<at::Tensor> out;
    for (const auto &u : impl_->units) out.push_back(u.shard);
    return out;
}

ShardLayout ShardedDataParallel::layout() const
{
    ShardLayout l;
    // In the optimizer's order: the emptied parameters (a pipeline stage's others) in no unit, with no elements.
    std::vector<size_t> at_layout(impl_->params.size());
    size_t k = 0;
    for (const auto &t : impl_->trainable) {
        const bool packed = k < impl_->params.size() && t.is_same(impl_->params[k].tensor);
        if (packed) at_layout[k] = l.params.size();
        l.params.push_back(t);
        l.param_unit.push_back(packed ? impl_->params[k].unit : 0);
        l.param_offset.push_back(packed ? impl_->params[k].offset : 0);
        if (packed) ++k;
    }
    for (const auto &u : impl_->units) {
        std::vector<size_t> members;
        for (size_t i : u.params) members.push_back(at_layout[i]);
        l.unit_params.push_back(std::move(members));
        l.shard_numel.push_back(u.shard_numel);
    }
    l.shard_world = impl_->shard_world();
    l.shard_rank = impl_->rank_in_shard();
    l.shard_options = impl_->units.front().shard.options();
    if (impl_->cfg.zero_stage == 3 && impl_->cfg.sub_group_size.given()) l.sub_group_numel = impl_->cfg.sub_group_size.value;
    std::weak_ptr<Impl> weak = impl_;
    auto lock = [weak] {
        auto s = weak.lock();
        if (!s) fail(ACCEL_ERR_FAILED_PRECONDITION, "optimizer: its model's sharding engine is gone (the accelerator was freed)");
        return s;
    };
    if (impl_->offload && impl_->offload->to_files())
        l.page = [lock](size_t unit, bool in) -> std::function<void()> {
            auto s = lock();
            s->drain(); // nothing queued reads the files while they change
            at::NoGradGuard no_grad;
            Impl::Unit &u = s->units.at(unit);
            std::function<void()> wait = in ? s->offload->start_page_in(unit, u.shard)
                                            : s->offload->start_page_out(unit, u.shard);
            s->note_peak(); // a shard being read or written counts as in memory
            return [lock, wait = std::move(wait)] {
                wait();
                lock()->note_peak();
            };
        };
    l.gather = [lock](size_t unit, const at::Tensor &shard) {
        auto s = lock();
        s->drain();
        const Impl::Unit &u = s->units.at(unit);
        if (s->shard_world() == 1) return shard.narrow(0, 0, u.numel);
        return at::cat(s->comm->allgather(shard.contiguous()), 0).narrow(0, 0, u.numel);
    };
    return l;
}

namespace {

// Each parameter's index in `l` (the optimizer's order), which is not its index in the engine's packed parameters
// when emptied ones come first: a pipeline stage after the first holds the earlier stages' parameters emptied.
std::map<const c10::TensorImpl *, size_t> layout_index(const ShardLayout &l)
{
    std::map<const c10::TensorImpl *, size_t> out;
    for (size_t j = 0; j < l.params.size(); ++j) out.emplace(l.params[j].unsafeGetTensorImpl(), j);
    return out;
}

} // namespace

ShardedState ShardedDataParallel::sharded_state_dict(const Model &model) const
{
    const Impl &s = *impl_;
    const ShardLayout l = layout();
    ShardedState out;
    out.world_size = l.shard_world;
    out.rank = l.shard_rank;
    std::map<const c10::TensorImpl *, size_t> trainable;
    const auto at_layout = layout_index(l);
    for (size_t k = 0; k < s.params.size(); ++k) trainable[s.params[k].tensor.unsafeGetTensorImpl()] = k;
    std::set<const c10::TensorImpl *> seen; // a tied weight is saved once, under its first name
    std::vector<at::Tensor> shards(s.units.size()); // each unit's shard values, read once
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()}) {
        for (const auto &[name, t] : *list) {
            if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) continue;
            ShardedTensor e;
            e.name = name;
            e.dtype = s.own_dtype(t);
            e.shape = t.sizes().vec();
            auto it = trainable.find(t.unsafeGetTensorImpl());
            if (it != trainable.end()) {
                const size_t k = it->second, j = at_layout.at(t.unsafeGetTensorImpl());
                e.dtype = at::kFloat; // the master shards' (parameters may be 16-bit copies)
                for (int32_t r = 0; r < l.shard_world; ++r)
                    if (TensorPiece p = l.piece(j, r); p.numel > 0) e.pieces.push_back(p);
                const size_t ui = s.params[k].unit;
                if (!shards[ui].defined()) shards[ui] = s.shard_values(s.units[ui]);
                e.local = l.local_piece(j, shards[ui]);
            } else if (auto [f, i] = s.flat_of(t); f != nullptr) { // a sharded frozen parameter: cut as its flat is
                for (int32_t r = 0; r < l.shard_world; ++r)
                    if (TensorPiece p = f->piece(i, r); p.numel > 0) e.pieces.push_back(p);
                e.local = f->local_piece(i, l.shard_rank);
            } else if (t.numel() > 0) { // other frozen parameters and buffers are whole on every rank
                e.pieces.push_back(TensorPiece{0, 0, t.numel()});
                if (l.shard_rank == 0) e.local = s.own_value(t).reshape({-1}).to(e.dtype);
            }
            out.tensors.push_back(std::move(e));
        }
    }
    return out;
}

std::pair<ApplyState, std::vector<std::string>> ShardedDataParallel::load_sharded_state_dict(const Model &model,
                                                                                            const ShardedSource &src)
{
    Impl &s = *impl_;
    const ShardLayout l = layout();
    std::map<const c10::TensorImpl *, size_t> trainable;
    const auto at_layout = layout_index(l);
    for (size_t k = 0; k < s.params.size(); ++k) trainable[s.params[k].tensor.unsafeGetTensorImpl()] = k;
    std::set<const c10::TensorImpl *> seen;
    // Offloaded shards are read into memory (views need it) and written back out once loaded; a load that
    // fails before then leaves them in memory, which every later use accepts.
    s.page_all(true);
    struct Read {
        std::string name;
        int64_t offset;
        at::Tensor dst;
    };
    std::vector<Read> reads;
    std::vector<std::string> names;
    for (const auto *list : {&model.named_parameters(), &model.named_buffers()}) {
        for (const auto &[name, t] : *list) {
            if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) continue;
            std::vector<int64_t> shape;
            if (!src.find(name, shape))
                fail(ACCEL_ERR_INVALID_ARGUMENT, "load_state: the sharded state dict has no tensor \"" + name + "\" of the model");
            if (at::IntArrayRef(shape) != t.sizes())
                fail(ACCEL_ERR_INVALID_ARGUMENT, "load_state: tensor \"" + name + "\" of the sharded state dict has shape " +
                                                     c10::str(at::IntArrayRef(shape)) + ", the model's has " + c10::str(t.sizes()));
            names.push_back(name);
            auto it = trainable.find(t.unsafeGetTensorImpl());
            if (auto [f, i] = s.flat_of(t); f != nullptr) { // a sharded frozen parameter: this rank's piece
                if (at::Tensor mine = f->local_piece(i, l.shard_rank); mine.defined())
                    reads.push_back({name, f->piece(i, l.shard_rank).offset, mine});
                if (f->gathered) reads.push_back({name, 0, t.detach()});
                continue;
            }
            if (it == trainable.end()) { // other frozen parameters and buffers are whole on every rank
                if (t.numel() == 0) continue;
                reads.push_back({name, 0, s.own_value(t)});
                if (s.frozen_master(t)) reads.push_back({name, 0, t.detach()}); // its param_dtype copy too
                continue;
            }
            const size_t k = it->second;
            Impl::Unit &u = s.units[s.params[k].unit];
            // The whole parameter in the unit's buffer: only while that buffer has memory.
            auto whole = [&] { return u.full.narrow(0, s.params[k].offset, s.params[k].numel); };
            if (!s.separate_shards()) {
                reads.push_back({name, 0, whole()}); // the buffer persists; the shard is a view of it
                continue;
            }
            const size_t j = at_layout.at(t.unsafeGetTensorImpl());
            if (at::Tensor mine = l.local_piece(j, u.shard.detach()); mine.defined())
                reads.push_back({name, l.piece(j, l.shard_rank).offset, mine});
            // The unit is whole now (or keeps a 16-bit copy): keep that copy current too (read converts dtypes).
            if (u.gathered) reads.push_back({name, 0, whole()});
        }
    }
    std::weak_ptr<Impl> weak = impl_;
    ApplyState apply = [reads = std::move(reads), src, weak] {
        at::NoGradGuard no_grad;
        for (const auto &r : reads) src.read(r.name, r.offset, r.dst);
        if (auto e = weak.lock()) e->page_all(false);
    };
    return {std::move(apply), std::move(names)};
}

at::Tensor ShardedDataParallel::own_value(const at::Tensor &tensor) const { return impl_->own_value(tensor); }

bool ShardedDataParallel::shards_frozen() const
{
    bool any = false;
    impl_->for_each_flat([&any](const FrozenFlat &) { any = true; });
    return any;
}

void ShardedDataParallel::after_optimizer_step()
{
    Impl &s = *impl_;
    s.drain(); // collectives of the training thread only run with nothing queued
    if (s.params_sharded()) return; // ZeRO-3: the next forward gathers
    at::NoGradGuard no_grad;
    if (s.shard_world() == 1) { // ZeRO-0 / NO_SHARD: the whole buffer was stepped (or its float32 master)
        if (s.low_precision())
            for (auto &u : s.units) u.full.copy_(u.shard.detach());
        return;
    }
    // In allgather_bucket_size buckets of consecutive units (one unit each under FSDP).
    std::vector<Impl::Unit *> group;
    int64_t numel = 0;
    for (auto &u : s.units) {
        if (!group.empty() && numel + u.padded > s.allgather_bucket) {
            ++s.mem.all_gathers;
            s.allgather_into(group);
            group.clear();
            numel = 0;
        }
        group.push_back(&u);
        numel += u.padded;
    }
    ++s.mem.all_gathers;
    s.allgather_into(group);
}

void ShardedDataParallel::zero_grad()
{
    impl_->drain();
    for (auto &u : impl_->units) {
        for (size_t i : u.params) impl_->params[i].tensor.mutable_grad().reset();
        u.shard.mutable_grad().reset();
        u.grad_full = at::Tensor();
        u.grad_shard = at::Tensor();
    }
}

void ShardedDataParallel::set_tensor_parallel(std::shared_ptr<distributed::Communicator> tp,
                                              const std::vector<at::Tensor> &split)
{
    for (auto &p : impl_->params)
        p.tp_split = std::any_of(split.begin(), split.end(), [&p](const at::Tensor &t) { return t.is_same(p.tensor); });
    impl_->tp = std::move(tp);
}

namespace {

// Under tensor parallelism: the gradient norm of the whole model from this rank's shards, whose parameters are
// tp slices (`split`) or replicated over `tp`. Each piece's |g|^p goes to its kind's sum; both sums are reduced
// over the shard group, the slices' also over tp (the replicated part is equal on every tp rank: counted once);
// under a pipeline (`pp` non-null) the total then over every stage's.
at::Tensor tensor_parallel_norm(const std::vector<std::pair<at::Tensor, bool>> &pieces, double norm_type,
                                distributed::Communicator *shards, distributed::Communicator &tp,
                                distributed::Communicator *pp)
{
    const bool inf = std::isinf(norm_type);
    at::Tensor acc = at::zeros({2}, at::kDouble); // [split, replicated]
    for (const auto &[g, split] : pieces) {
        at::Tensor part = inf ? g.abs().max().to(at::kDouble) : at::norm(g, norm_type).to(at::kDouble).pow(norm_type);
        at::Tensor slot = acc.narrow(0, split ? 0 : 1, 1);
        slot.copy_(inf ? at::maximum(slot, part.reshape({1})) : slot + part);
    }
    const auto op = inf ? distributed::ReduceOp::Max : distributed::ReduceOp::Sum;
    if (shards != nullptr) shards->allreduce(acc, op);
    at::Tensor split = acc.narrow(0, 0, 1).clone();
    tp.allreduce(split, op);
    const at::Tensor rep = acc.narrow(0, 1, 1);
    at::Tensor stage = inf ? at::maximum(split, rep) : split + rep;
    if (pp != nullptr) pp->allreduce(stage, op);
    at::Tensor total = inf ? stage : stage.pow(1.0 / norm_type);
    return total.to(at::kFloat).reshape({});
}

} // namespace

double ShardedDataParallel::clip_grad_norm(double max_norm, double norm_type, bool clip)
{
    Impl &s = *impl_;
    s.drain(); // collectives of the training thread only run with nothing queued
    at::NoGradGuard no_grad;
    // Each parameter's piece of this rank's shard (shards are contiguous ranges of the unit's buffer), but the one
    // another pipeline stage counts.
    const auto pieces = [&s] {
        std::vector<std::pair<at::Tensor, bool>> out;
        for (auto &u : s.units) {
            if (!u.shard.grad().defined()) continue;
            const int64_t lo = s.rank_in_shard() * u.shard_numel, hi = lo + u.shard_numel;
            for (size_t i : u.params) {
                const auto &p = s.params[i];
                const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
                if (b > a && !p.tensor.is_same(s.counted_elsewhere))
                    out.emplace_back(u.shard.grad().narrow(0, a - lo, b - a), p.tp_split);
            }
        }
        return out;
    };
    std::vector<at::Tensor> grads;
    if (s.counted_elsewhere.defined())
        for (const auto &piece : pieces()) grads.push_back(piece.first);
    else
        for (auto &u : s.units)
            if (u.shard.grad().defined()) grads.push_back(u.shard.grad());
    const bool across = s.shard_world() > 1;
    at::Tensor total;
    if (s.tp && s.tp->size() > 1) {
        total = tensor_parallel_norm(pieces(), norm_type, across ? s.comm.get() : nullptr, *s.tp, s.pp.get());
    } else if (std::isinf(norm_type)) {
        total = at::zeros({}, at::kFloat);
        for (const auto &g : grads) total = at::maximum(total, g.abs().max());
        at::Tensor t = total.reshape({1}).clone();
        if (across) s.comm->allreduce(t, distributed::ReduceOp::Max);
        if (s.pp) s.pp->allreduce(t, distributed::ReduceOp::Max); // every pipeline stage's
        total = t.reshape({});
    } else {
        // sum over shards of |g|^p, all-reduced (and over the pipeline's stages), then the p-th root: the norm of
        // the whole gradient.
        at::Tensor acc = at::zeros({1}, at::kDouble);
        for (const auto &g : grads) acc += at::norm(g, norm_type).to(at::kDouble).pow(norm_type);
        if (across) s.comm->allreduce(acc, distributed::ReduceOp::Sum);
        if (s.pp) s.pp->allreduce(acc, distributed::ReduceOp::Sum);
        total = acc.pow(1.0 / norm_type).to(at::kFloat).reshape({});
    }
    if (clip) {
        at::Tensor coef = at::clamp(max_norm / (total + 1e-6), c10::nullopt, 1.0);
        for (auto &u : s.units) {
            if (u.grad_full.defined()) u.grad_full.mul_(coef); // ZeRO-0/1: every rank's full copy
            else if (u.grad_shard.defined()) u.grad_shard.mul_(coef);
        }
    }
    return total.item<double>();
}

void ShardedDataParallel::clip_grad_value(double clip_value)
{
    at::NoGradGuard no_grad;
    for (auto &u : impl_->units) {
        if (u.grad_full.defined()) u.grad_full.clamp_(-clip_value, clip_value);
        else if (u.grad_shard.defined()) u.grad_shard.clamp_(-clip_value, clip_value);
    }
}

void ShardedDataParallel::summon_full_params(bool on)
{
    Impl &s = *impl_;
    s.drain(); // collectives of the training thread only run with nothing queued
    if (on == s.summoned)
        fail(ACCEL_ERR_FAILED_PRECONDITION, on ? "summon_full_params_begin: the parameters are already summoned"
                                               : "summon_full_params_end: no matching summon_full_params_begin");
    at::NoGradGuard no_grad;
    if (on) {
        if (s.low_precision()) {
            for (auto &u : s.units) s.summon_master(u);
            s.cast_buffers_to(true);
        } else {
            for (size_t ui = 0; ui < s.units.size(); ++ui) s.gather(ui);
        }
        for (auto &u : s.units) s.gather_flats(u.frozen); // gathered with their unit already, unless 16-bit
        s.gather_flats(s.root_frozen);
        s.summoned = true;
        return;
    }
    s.summoned = false;
    // Writes made while summoned reach the shards (FSDP's writeback=True); frozen flats are freed with their unit.
    const int32_t r = s.rank_in_shard();
    s.for_each_flat([r](FrozenFlat &f) { write_back(f, r); });
    s.release_flats(s.root_frozen);
    if (s.low_precision()) {
        for (auto &u : s.units) {
            s.unsummon_master(u);
            if (!u.gathered) s.release_flats(u.frozen);
        }
        s.cast_buffers_to(false);
        s.install_gradient_hooks(impl_); // the parameters changed dtype twice
        return;
    }
    if (!s.params_sharded()) return;
    for (auto &u : s.units) {
        s.store_shard(u, u.full.narrow(0, s.rank_in_shard() * u.shard_numel, u.shard_numel));
        s.reshard(u);
    }
}

bool ShardedDataParallel::summoned() const { return impl_->summoned; }

std::vector<bool> ShardedDataParallel::checkpointed_layers() const
{
    const auto &of = impl_->unit_of_layer;
    const auto &c = impl_->cfg;
    const bool every = c.auto_wrap_policy == "NO_WRAP" && !c.wrap_every_layer;
    std::vector<bool> out(of.size());
    for (size_t l = 0; l < of.size(); ++l) out[l] = every || of[l] >= 0;
    return out;
}

void ShardedDataParallel::release(Model &model)
{
    Impl &s = *impl_;
    s.drain(); // collectives of the training thread only run with nothing queued
    s.page_all(true); // the shards outlive the engine in the optimizer until it is unsharded
    at::NoGradGuard no_grad;
    if (s.low_precision()) { // the model gets its float32 parameters (the masters) and buffers back
        for (auto &u : s.units) s.summon_master(u);
        s.cast_buffers_to(true);
    } else {
        for (size_t ui = 0; ui < s.units.size(); ++ui) s.gather(ui);
    }
    for (auto &u : s.units) s.gather_flats(u.frozen);
    s.gather_flats(s.root_frozen);
    for (auto &p : s.params) {
        p.tensor.mutable_grad().reset(); // views of flat gradient buffers that go away
        p.tensor.set_data(p.tensor.detach().clone());
    }
    for (auto &u : s.units) {
        for (auto &f : u.frozen) unpack(f);
        u.frozen.clear();
    }
    for (auto &f : s.root_frozen) unpack(f);
    s.root_frozen.clear();
    for (auto &u : s.units) {
        u.shard.mutable_grad().reset();
        u.grad_full = at::Tensor();
        u.grad_shard = at::Tensor();
        u.master_full = at::Tensor();
    }
    model.forward_hooks.reset();
    s.active = false; // the gradient hooks hold the engine weakly: once it is freed they do nothing
}

ShardedMemory ShardedDataParallel::memory() const
{
    impl_->note_peak();
    ShardedMemory m = impl_->mem;
    m.parameter_bytes = impl_->parameter_bytes();
    m.gradient_bytes = impl_->gradient_bytes();
    m.offloaded_parameter_bytes = impl_->offloaded_parameter_bytes();
    return m;
}

const config::ShardingConfig &ShardedDataParallel::config() const { return impl_->cfg; }

} // namespace accel::parallel
