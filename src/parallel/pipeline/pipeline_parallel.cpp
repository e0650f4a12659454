#include "parallel/pipeline/pipeline_parallel.hpp"

#include "common/error.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "model/model.hpp"
#include "optimizer/accelerated_optimizer.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/ddp.hpp"
#include "parallel/fsdp/sharded_data_parallel.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/stage_init.hpp"
#include "parallel/pipeline/stages.hpp"
#include "parallel/tensor_parallel/mappings.hpp"
#include "parallel/tensor_parallel/plan.hpp"
#include "parallel/whole_gradients.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <unordered_set>

namespace accel::parallel::pp {

namespace {

using distributed::ReduceOp;

// Tags of the schedule's messages (gloo, MPI and the thread backend match on them; NCCL on order alone).
// Gloo takes only tags >= 0.
constexpr int32_t kTiedTag = 0;
int32_t forward_tag(int64_t micro) { return static_cast<int32_t>(2 * micro + 1); }
int32_t backward_tag(int64_t micro) { return static_cast<int32_t>(2 * micro + 2); }
// Under interleaving two stages exchange activations and gradients of several chunks (on two stages both
// directions carry both): a message is named by its micro-batch and the chunk that sends it.
int64_t chunk_message(const Op &op, int32_t sender_chunk, int32_t chunks) { return op.micro * chunks + sender_chunk; }

// Activations travel in float32 whatever the stage computed in (autocast): the receiver allocates before
// it knows, and the precision of the stage boundary does not change what the stages compute.
constexpr at::ScalarType kWire = at::kFloat;

// `mine` as `owner` holds it (undefined: nothing), the same tensor on every rank of `group` afterwards (a
// copy on `device`): its dtype and shape first, which the others do not know, then its values.
at::Tensor from_owner(distributed::Communicator &group, const at::Tensor &mine, int32_t owner, const at::Device &device)
{
    constexpr int64_t kMaxDims = 8;
    at::Tensor header = at::zeros({kMaxDims + 3}, at::kLong); // defined, dtype, dims, sizes
    auto *h = header.data_ptr<int64_t>();
    if (group.rank() == owner && mine.defined()) {
        if (mine.dim() > kMaxDims) fail(ACCEL_ERR_INTERNAL, "pipeline: a tensor of " + std::to_string(mine.dim()) + " dimensions");
        h[0] = 1;
        h[1] = static_cast<int64_t>(mine.scalar_type());
        h[2] = mine.dim();
        for (int64_t d = 0; d < mine.dim(); ++d) h[3 + d] = mine.size(d);
    }
    group.broadcast(header, owner);
    if (h[0] == 0) return {};
    at::Tensor values = group.rank() == owner ? mine.detach().contiguous()
                                              : at::empty(std::vector<int64_t>(h + 3, h + 3 + h[2]),
                                                          at::TensorOptions(static_cast<at::ScalarType>(h[1])).device(device));
    group.broadcast(values, owner);
    return values;
}

// A stage boundary's activation. Its shape is known to the receiver when the model fixes it (the transformers':
// [rows, T, hidden_size]); a sequential spec's layers flatten, widen or keep a sequence dimension, so its boundaries
// (Shape::hidden_size 0) carry their sizes first: a small header on the same link and tag just before the values,
// which every backend delivers in order (NCCL has no tags and pairs by issue order; the pair stays adjacent). A
// header per message rather than shapes inferred once: a forward's micro-batches may differ in rows, interleaved
// chunks in widths, and nothing is run twice to learn them. Gradients need none: they have the shape of the
// activation the stage itself sent.
constexpr int64_t kMaxBoundaryDims = 8;

using Works = std::vector<std::shared_ptr<distributed::Work>>;

// Posts `y` to stage `to` without waiting; `sends` gains the works that finish it.
void send_activation(distributed::Communicator &link, const at::Tensor &y, int32_t to, int32_t tag, bool with_shape, Works &sends)
{
    const at::Tensor values = y.detach().to(kWire).contiguous();
    if (with_shape) {
        if (values.dim() > kMaxBoundaryDims)
            fail(ACCEL_ERR_UNIMPLEMENTED, "pipeline: an activation of " + std::to_string(values.dim()) + " dimensions between stages "
                                          "(at most " + std::to_string(kMaxBoundaryDims) + ")");
        at::Tensor header = at::zeros({kMaxBoundaryDims + 1}, at::kLong);
        header[0] = values.dim();
        for (int64_t d = 0; d < values.dim(); ++d) header[d + 1] = values.size(d);
        sends.push_back(link.send_async(header, to, tag));
    }
    sends.push_back(link.send_async(values, to, tag));
}

void wait_all(Works &works)
{
    for (auto &w : works) w->wait();
    works.clear();
}


// `known`: the sizes the receiver expects (empty: a header says them).
at::Tensor recv_activation(distributed::Communicator &link, std::vector<int64_t> known, const at::TensorOptions &wire,
                           int32_t from, int32_t tag)
{
    if (known.empty()) {
        at::Tensor header = at::empty({kMaxBoundaryDims + 1}, at::kLong);
        link.recv(header, from, tag);
        const int64_t *h = header.data_ptr<int64_t>();
        if (h[0] < 0 || h[0] > kMaxBoundaryDims) fail(ACCEL_ERR_INTERNAL, "pipeline: a boundary header of " + std::to_string(h[0]) + " dimensions");
        known.assign(h + 1, h + 1 + h[0]);
    }
    at::Tensor x = at::empty(known, wire);
    link.recv(x, from, tag);
    return x;
}

// One stage forward inside the model's forward hooks, as a whole model's forward runs in them (pp x sharding: the
// engine gathers its root unit before, and its outputs leave in float32); `model` null: none.
template <class F> at::Tensor hooked(Model *model, const at::Tensor &x, F &&forward)
{
    ForwardHooks *hooks = model != nullptr ? model->forward_hooks.get() : nullptr;
    if (hooks == nullptr) return forward(x);
    return hooks->after_forward(forward(hooks->before_forward(x)));
}

// pp x sharding, after the reduction: each stage reduced the tied embedding's summed gradient in its own layout,
// and a sum over more than two ranks rounds by the layout (reduction_depends_on_layout), so the two copies would
// drift apart by rounding. The last stage takes the first's reduced gradient (collective over the first stage's
// shard group; `first`: this rank is on it, `peer` its counterpart), so both copies stay equal bit for bit.
void align_tied_gradient(ShardedDataParallel &engine, const at::Tensor &tied, distributed::Communicator &pp, bool first,
                         int32_t peer)
{
    if (!tied.defined() || !tied.requires_grad() || !engine.reduction_depends_on_layout()) return;
    if (first) {
        pp.send(engine.reduced_gradient(tied).contiguous(), peer, kTiedTag);
        return;
    }
    at::Tensor whole = at::empty(tied.sizes(), tied.options().dtype(at::kFloat)); // the shards' gradients are float32
    pp.recv(whole, peer, kTiedTag);
    engine.set_reduced_gradient(tied, whole);
}

// The tensor objects of `tensors`, for membership tests in one lookup each (a model's parameters against a list
// of some of them: one pass, not one scan of the list per parameter).
std::unordered_set<const c10::TensorImpl *> impls_of(const std::vector<at::Tensor> &tensors)
{
    std::unordered_set<const c10::TensorImpl *> out;
    for (const auto &t : tensors) out.insert(t.unsafeGetTensorImpl());
    return out;
}

} // namespace

PipelineParallel::PipelineParallel(PipelineStageModel &model, std::shared_ptr<distributed::Communicator> pp_group,
                                   int32_t num_micro_batches, std::string schedule,
                                   std::shared_ptr<distributed::Communicator> dp_group,
                                   const config::DistributedDataParallelKwargs *ddp)
    : model_(model), pp_(std::move(pp_group)), micro_batches_(num_micro_batches), schedule_(std::move(schedule))
{
    // The stage's order, once: the same for every batch (interleaved, it replays the whole clock). An unknown
    // name (or micro-batches interleaving cannot group) fails here, not at the first step.
    ops_ = stage_schedule(schedule_, stage(), num_stages(), micro_batches_, chunks());
    last_backward_.assign(static_cast<size_t>(chunks()), 0);
    for (size_t k = 0; k < ops_.size(); ++k)
        if (ops_[k].kind == OpKind::Backward) last_backward_[static_cast<size_t>(ops_[k].chunk)] = k;
    if (const auto &tp = model_.tensor_parallel_group(); tp && tp->size() > 1) tp_ = tp;
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto &np : model_.stage_model().named_parameters())
        if (np.second.numel() > 0) {
            params_.push_back(np.second);
            named.push_back(np);
            if (model_.tensor_parallel_slicing().count(np.first) != 0) tp_split_.push_back(np.second);
        }
    if (dp_group && dp_group->size() > 1) {
        const config::DistributedDataParallelKwargs defaults;
        dp_ = std::make_shared<DistributedDataParallel>(std::move(named), std::vector<std::pair<std::string, at::Tensor>>{},
                                                        std::move(dp_group), ddp != nullptr ? *ddp : defaults);
    }
    const bool first = stage() == 0, last = stage() == num_stages() - 1;
    if (num_stages() > 1 && (first || last)) tied_ = model_.tied_embedding(); // the head's weight too when tied
}

int32_t PipelineParallel::stage() const { return pp_->rank(); }
int32_t PipelineParallel::chunks() const { return static_cast<int32_t>(model_.pipeline_chunks()); }
int32_t PipelineParallel::num_stages() const { return pp_->size(); }

int64_t PipelineParallel::boundary_length(int64_t length, bool cached) const
{
    // pp x cp: `length` is this rank's part of the sequence, which the first stage checks as any cp model does.
    // Generation (`cached`) runs whole: each rank's model set its cp group aside before calling the pipeline
    // (forward_cached), as without a pipeline.
    if (cp_ && !cached) parallel::cp::check_model_input(length, false, model_.pipeline_shape().type);
    if (!model_.sequence_parallel()) return length;
    parallel::tp::check_sequence_split(length, cached, tp_->size(), model_.pipeline_shape().type);
    return length / tp_->size();
}

double PipelineParallel::run(const at::Tensor &inputs, const at::Tensor &labels, const LossFn &loss, const ScaleFn &scale)
{
    const double start = distributed::now_seconds();
    double busy = 0.0;
    auto timed = [&busy](auto &&f) {
        const double t0 = distributed::now_seconds();
        f();
        busy += distributed::now_seconds() - t0;
    };
    const int64_t m = micro_batches_;
    const PipelineStageModel::Shape shape = model_.pipeline_shape();
    const bool shaped = shape.hidden_size > 0; // else each boundary carries its shape (send_activation)
    if (!inputs.defined() || (shaped ? inputs.dim() != 2 : inputs.dim() == 0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("batch: a pipeline-parallel ") + shape.type + " model takes " + (shaped ? "token ids [batch, seq]" : "a batch [rows, ...]") + ", got " +
                                             (inputs.defined() ? "shape " + c10::str(inputs.sizes()) : std::string("none")));
    if (inputs.size(0) % m != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: its " + std::to_string(inputs.size(0)) + " rows do not divide into "
                                         "parallelism_config.num_micro_batches (" + std::to_string(m) + ")");
    if (!labels.defined() || labels.size(0) != inputs.size(0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: a pipeline needs labels with the inputs' rows");
    const int32_t s = stage(), p = num_stages(), v = chunks();
    const bool last = s == p - 1; // the loss comes after this stage's last chunk
    const int64_t rows = inputs.size(0) / m;
    const at::TensorOptions wire = params_.empty() ? at::TensorOptions(kWire) : params_.front().options().dtype(kWire);
    const std::vector<int64_t> hidden = shaped ? std::vector<int64_t>{rows, boundary_length(inputs.size(1), false), shape.hidden_size}
                                               : std::vector<int64_t>{};

    // Per micro-batch: the activation received (whose gradient goes back), the stage's output (the scaled
    // loss on the last stage) and the gradient received for it; each is dropped once used.
    // Interleaved: per micro-batch and chunk (micro * chunks + chunk).
    const auto slots = static_cast<size_t>(m * v);
    std::vector<at::Tensor> received(slots), outputs(slots), grads(slots);
    at::Tensor loss_sum = at::zeros({}, at::kDouble);
    int64_t live = 0;
    times_.peak_live = 0;
    // Transfers do not block the schedule: sends are posted and waited for at the end of the step, receives posted
    // ahead, in the schedule's order (NCCL pairs by order), and waited for at their turn. Posted early, a transfer
    // runs while the stage computes (Gloo's sender waits for the receiver's posting); a round of the pipeline's
    // messages ahead (2 per virtual stage) is enough for that, more would only hold buffers longer. Posting a send
    // copies it into Gloo's socket on this thread (~0.2-0.5 ms per 512 KB); a thread of its own for that measured
    // slower with compute on every core (interleaved's idle 0.10-0.12 against 0.07-0.09: BENCHMARKS.md), and moving
    // each send up to right after its compute changed nothing beyond the noise (bench/pp_bubble.sh), so neither is done.
    const size_t recv_ahead = static_cast<size_t>(2 * p * v);
    Works sends;
    std::vector<std::shared_ptr<distributed::Work>> posted(ops_.size());
    std::vector<size_t> recvs; // the ops that receive, in order
    for (size_t k = 0; k < ops_.size(); ++k)
        if (ops_[k].kind == OpKind::RecvActivation || ops_[k].kind == OpKind::RecvGrad) recvs.push_back(k);
    size_t next_recv = 0, next_post = 0; // in recvs: the next to take, the next to post
    // A receive is posted once its size is known: a gradient's after the forward that made the output, a shapeless
    // activation's never (its header says it; received at its turn).
    auto post_ahead = [&] {
        for (; next_post < recvs.size() && next_post < next_recv + recv_ahead; ++next_post) {
            const size_t k = recvs[next_post];
            const Op &op = ops_[k];
            const auto i = static_cast<size_t>(op.micro * v + op.chunk);
            const VirtualStage prev = previous_virtual_stage(s, op.chunk, p), next = next_virtual_stage(s, op.chunk, p);
            if (op.kind == OpKind::RecvActivation) {
                if (!shaped) break;
                received[i] = at::empty(hidden, wire);
                posted[k] = pp_->recv_async(received[i], prev.stage, forward_tag(chunk_message(op, prev.chunk, v)));
            } else {
                if (!outputs[i].defined()) break;
                grads[i] = at::empty(outputs[i].sizes(), wire); // the shape of the activation sent
                posted[k] = pp_->recv_async(grads[i], next.stage, backward_tag(chunk_message(op, next.chunk, v)));
            }
        }
    };
    for (size_t k = 0; k < ops_.size(); ++k) {
        const Op &op = ops_[k];
        const auto i = static_cast<size_t>(op.micro * v + op.chunk);
        const bool loss_here = last && op.chunk == v - 1;
        const VirtualStage prev = previous_virtual_stage(s, op.chunk, p);
        post_ahead();
        switch (op.kind) {
        case OpKind::RecvActivation:
            if (posted[k]) posted[k]->wait();
            else received[i] = recv_activation(*pp_, hidden, wire, prev.stage, forward_tag(chunk_message(op, prev.chunk, v)));
            posted[k].reset();
            next_post = std::max(next_post, ++next_recv);
            received[i].requires_grad_(true);
            break;
        case OpKind::Forward:
            model_.select_pipeline_chunk(static_cast<size_t>(op.chunk));
            timed([&] {
                at::Tensor y = hooked(hooked_, received[i].defined() ? received[i] : inputs.narrow(0, op.micro * rows, rows),
                                      [this](const at::Tensor &x) { return model_.forward_stage(x, nullptr); });
                if (loss_here) {
                    at::Tensor l = loss(y, labels.narrow(0, op.micro * rows, rows));
                    loss_sum += l.detach().to(at::kDouble).cpu();
                    y = scale(l / static_cast<double>(m)); // the batch's loss is the micro-batches' mean
                }
                outputs[i] = y;
            });
            times_.peak_live = std::max(times_.peak_live, ++live);
            break;
        case OpKind::SendActivation:
            send_activation(*pp_, outputs[i], next_virtual_stage(s, op.chunk, p).stage, forward_tag(chunk_message(op, op.chunk, v)),
                            !shaped, sends);
            break;
        case OpKind::RecvGrad:
            posted[k]->wait(); // posted by post_ahead above at the latest: the forward came first
            posted[k].reset();
            ++next_recv;
            break;
        case OpKind::Backward:
            // DDP's no_sync on every backward but the last of each chunk (the gradients summed locally first).
            if (dp_) dp_->set_require_sync(require_sync_ && k == last_backward_[static_cast<size_t>(op.chunk)]);
            timed([&] {
                if (loss_here) outputs[i].backward();
                else outputs[i].backward(grads[i].to(outputs[i].scalar_type()));
            });
            outputs[i] = grads[i] = at::Tensor(); // this micro-batch's activations go now
            --live;
            break;
        case OpKind::SendGrad:
            sends.push_back(pp_->send_async(received[i].grad().contiguous(), prev.stage, backward_tag(chunk_message(op, op.chunk, v))));
            received[i] = at::Tensor();
            break;
        }
    }
    wait_all(sends);
    const double schedule_end = distributed::now_seconds();
    if (dp_ && require_sync_) dp_->finish_backward(); // the stage's gradients averaged over its replicas
    if (engine_) engine_->finish_backward(); // the units back to shards, the gradients summed locally
    if (require_sync_) sync_tied_gradient();
    // Sharded: reduced after the tied embedding's exchange (each stage's shards of it would not line up).
    if (engine_ && require_sync_) {
        engine_->reduce_accumulated();
        align_tied_gradient(*engine_, tied_, *pp_, stage() == 0, stage() == 0 ? p - 1 : 0);
    }
    at::Tensor mean = (loss_sum / static_cast<double>(m)).reshape({1});
    pp_->broadcast(mean, p - 1); // every rank reports the loss
    times_.wall = distributed::now_seconds() - start;
    times_.busy = busy;
    times_.after = start + times_.wall - schedule_end;
    return mean.item<double>();
}

at::Tensor PipelineParallel::forward(const at::Tensor &input, KvCache *cache)
{
    at::NoGradGuard no_grad;
    const PipelineStageModel::Shape c = model_.pipeline_shape();
    const bool shaped = c.hidden_size > 0; // else each boundary carries its shape (send_activation)
    // Checked here on every rank (each holds the same ids), not on the first stage alone: a refusal there would
    // leave the others waiting for its activations.
    if (!shaped && (!input.defined() || input.numel() == 0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input: a pipeline-parallel ") + c.type + " model takes a non-empty tensor, got " +
                                             (input.defined() ? c10::str(input.sizes()) : std::string("none")));
    if (shaped && (!input.defined() || (input.scalar_type() != at::kLong && input.scalar_type() != at::kInt) ||
        (input.dim() != 1 && input.dim() != 2) || input.numel() == 0))
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input: a pipeline-parallel ") + c.type + " model takes non-empty token ids (int64 or int32) "
                                         "[batch, seq] or [seq], got " +
                                             (input.defined() ? c10::str(input.scalar_type(), " ", input.sizes()) : std::string("none")));
    if (shaped) {
        if (auto [lo, hi] = at::aminmax(input); lo.item<int64_t>() < 0 || hi.item<int64_t>() >= c.vocab_size)
            fail(ACCEL_ERR_OUT_OF_RANGE, "input: token id " + std::to_string(lo.item<int64_t>() < 0 ? lo.item<int64_t>() : hi.item<int64_t>()) +
                                             " is outside [0, " + std::to_string(c.vocab_size) + ")");
    }
    const int64_t past = cache != nullptr ? cache->length() : 0;
    // Under cp a forward's input is this rank's part; generation's is whole (the cp group set aside).
    const int64_t whole = input.size(-1) * (cp_ && cache == nullptr ? cp_->size() : 1);
    if (c.max_positions > 0 && past + whole > c.max_positions)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: " + std::to_string(past + whole) + " positions exceed " +
                                             c.max_positions_key + " " + std::to_string(c.max_positions));
    const int64_t length = shaped ? boundary_length(input.size(-1), cache != nullptr) : 0;
    const bool unbatched = shaped && input.dim() == 1;
    const at::Tensor ids = unbatched ? input.unsqueeze(0) : input;
    const int32_t s = stage(), p = num_stages();
    // A cache holds every row of each block: one micro-batch then.
    // A spec's first dimension need not be its rows (an unbatched transformer layer's [T, C]): one then too.
    const int64_t chunks = cache != nullptr || !shaped ? 1 : std::min<int64_t>(micro_batches_, ids.size(0));
    const std::vector<at::Tensor> pieces = ids.tensor_split(chunks, 0);
    const at::Device device = params_.empty() ? at::Device(at::kCPU) : params_.front().device();
    // Each micro-batch through the virtual stages in turn (interleaved: chunk c of stage s is virtual stage
    // c * p + s); every stage meets its messages in the one order they travel, so no wait can deadlock.
    const int32_t v = this->chunks();
    std::vector<at::Tensor> logits;
    Works sends;
    for (int64_t i = 0; i < chunks; ++i) {
        const at::Tensor &piece = pieces[static_cast<size_t>(i)];
        for (int32_t k = 0; k < v; ++k) {
            at::Tensor x = piece;
            if (s > 0 || k > 0) {
                const VirtualStage prev = previous_virtual_stage(s, k, p);
                x = recv_activation(*pp_, shaped ? std::vector<int64_t>{piece.size(0), length, c.hidden_size} : std::vector<int64_t>{},
                                    at::TensorOptions(kWire).device(device), prev.stage, forward_tag(i * v + prev.chunk));
            }
            model_.select_pipeline_chunk(static_cast<size_t>(k));
            at::Tensor y = hooked(hooked_, x, [this, cache](const at::Tensor &in) { return model_.forward_stage(in, cache); });
            if (s == p - 1 && k == v - 1) logits.push_back(y);
            else send_activation(*pp_, y, next_virtual_stage(s, k, p).stage, forward_tag(i * v + k), !shaped, sends);
        }
    }
    wait_all(sends);
    at::Tensor out = from_owner(*pp_, s == p - 1 ? at::cat(logits, 0) : at::Tensor(), p - 1, device);
    if (unbatched) out = out.squeeze(0);
    model_.mark_logits(out); // under tp: this rank's vocabulary columns, for the loss and generation
    return out;
}

// The tied token embedding lives on the first stage (as the embedding) and the last (as the head): each
// sends its gradient to the other and both add, so both hold the sum in the same bits (a + b == b + a) and
// their optimizers keep the two copies equal. The first sends before it receives, the last the other way
// round: blocking sends meet a posted receive.
void PipelineParallel::sync_tied_gradient()
{
    if (!tied_.defined() || !tied_.requires_grad()) return;
    at::NoGradGuard no_grad;
    at::Tensor g = tied_.grad();
    if (!g.defined()) fail(ACCEL_ERR_INTERNAL, "pipeline: the tied embedding has no gradient after the schedule");
    at::Tensor other = at::empty_like(g);
    const bool first = stage() == 0;
    const int32_t peer = first ? num_stages() - 1 : 0;
    if (first) {
        pp_->send(g.contiguous(), peer, kTiedTag);
        pp_->recv(other, peer, kTiedTag);
    } else {
        pp_->recv(other, peer, kTiedTag);
        pp_->send(g.contiguous(), peer, kTiedTag);
    }
    g.add_(other);
}

std::vector<at::Tensor> PipelineParallel::counted_parameters() const
{
    if (!tied_.defined() || stage() == 0) return params_;
    std::vector<at::Tensor> out; // the last stage's copy of the tied embedding is the first stage's
    for (const auto &t : params_)
        if (!t.is_same(tied_)) out.push_back(t);
    return out;
}

// torch's clip_grad_norm_ over the whole model: each stage's part of the norm (the tied embedding once; under
// tp the stage's tp group's part, as tensor parallelism counts it), reduced over the pp group, then every stage
// scales its gradients alike.
double PipelineParallel::clip_grad_norm(double max_norm, double norm_type, bool clip)
{
    if (engine_) return engine_->clip_grad_norm(max_norm, norm_type, clip); // summed over the stages (shard_with)
    at::NoGradGuard no_grad;
    const bool inf = std::isinf(norm_type);
    const std::vector<at::Tensor> counted = counted_parameters();
    at::Tensor acc;
    if (tp_) {
        std::vector<at::Tensor> split, replicated;
        const std::unordered_set<const c10::TensorImpl *> split_set = impls_of(tp_split_);
        for (const auto &t : counted) (split_set.count(t.unsafeGetTensorImpl()) != 0 ? split : replicated).push_back(t);
        acc = parallel::tp::tensor_parallel_norm_part(split, replicated, *tp_, norm_type);
    } else {
        acc = grad_norm_part(counted, norm_type);
    }
    pp_->allreduce(acc, inf ? ReduceOp::Max : ReduceOp::Sum);
    const double total = inf ? acc.item<double>() : std::pow(acc.item<double>(), 1.0 / norm_type);
    if (clip) {
        const double coef = std::min(1.0, max_norm / (total + 1e-6));
        for (const auto &t : params_)
            if (t.grad().defined()) t.grad().mul_(coef);
    }
    return total;
}

void PipelineParallel::clip_grad_value(double clip_value)
{
    if (engine_) return engine_->clip_grad_value(clip_value);
    whole_clip_grad_value(params_, clip_value);
}

WrapperMemory PipelineParallel::memory() const { return engine_ ? engine_->memory() : whole_memory(params_); }

void PipelineParallel::shard_with(std::shared_ptr<ShardedDataParallel> engine, Model &model)
{
    if (dp_) fail(ACCEL_ERR_INTERNAL, "pipeline: a stage under both DDP and the sharding engine");
    engine_ = std::move(engine);
    hooked_ = &model;
    // The clipping norm: every stage's part, the tied embedding counted on the first stage only.
    engine_->set_pipeline(pp_, static_cast<int32_t>(micro_batches_), tied_.defined() && stage() != 0 ? tied_ : at::Tensor());
    // pp x sharding x tp: the stage's tp slices are sharded as any parameter; the norm counts them over tp.
    if (tp_) engine_->set_tensor_parallel(tp_, tp_split_);
    engine_->set_require_sync(false); // run() reduces once the schedule is over
}

void PipelineParallel::summon_full_params(bool on)
{
    if (!engine_) return ParallelWrapper::summon_full_params(on);
    engine_->summon_full_params(on);
}

bool PipelineParallel::summoned() const { return engine_ && engine_->summoned(); }

std::shared_ptr<PipelineParallel> prepare_pipeline(Model &model, const distributed::DeviceMesh &mesh,
                                                   const config::ParallelismConfig &config,
                                                   const config::DistributedDataParallelKwargs *ddp,
                                                   const config::ShardingConfig *sharding)
{
    auto *staged = dynamic_cast<PipelineStageModel *>(&model);
    const std::string pp_size = "parallelism_config.pp_size " + std::to_string(config.pp_size);
    if (staged == nullptr) // the one model type without a layer list (model.hpp's units())
        fail(ACCEL_ERR_UNIMPLEMENTED, pp_size + ": a TorchScript model is one compiled graph with no layer list to cut into "
                                                "stages; pipeline parallelism is built for the gpt, llama and sequential "
                                                "(JSON spec) models");
    // A sequential spec has no context-parallel plan, with or without a pipeline (prepare refuses cp_size for it
    // first; this is the pipeline's own guard). Under pp x tp its boundaries carry this tp rank's activation and its
    // shape (a cut inside a colwise..rowwise region or a sequence-parallel run sends this rank's slice to the same tp
    // rank of the next stage), and the sharding engine's units are its layers, the other stages' empty.
    if (staged->pipeline_shape().hidden_size == 0 && mesh.size(distributed::MeshDim::Cp) > 1)
        fail(ACCEL_ERR_UNIMPLEMENTED, pp_size + " with cp_size / sp_size: a " + staged->pipeline_shape().type +
                                          " model has no context-parallel plan (refused as without a pipeline); context "
                                          "parallelism is built for gpt and llama");
    // Everything a config can get wrong is checked before the model changes (the tp split, the cut), so a
    // refused prepare leaves the user's model whole and usable.
    const auto &group = mesh.group(distributed::MeshDim::Pp);
    const int32_t p = group->size(), s = group->rank();
    // A model built by stage (stage_init.hpp) is cut as it was built; its other stages' parameters hold nothing.
    const std::shared_ptr<StageAtInit> built = StageAtInit::of(model);
    if (built) built->check_same_cut(p, s, config, mesh.size(distributed::MeshDim::Tp) > 1);
    const std::vector<std::pair<int64_t, int64_t>> blocks = built ? built->chunks() : stage_chunks(staged->block_costs(), config, p, s);
    stage_schedule(config.pp_schedule, s, p, config.num_micro_batches, static_cast<int32_t>(blocks.size()));
    // pp x tp: the whole model split over the stage's tp group first (the cut then keeps this rank's slices; a
    // model built by stage gives the other stages' shapes on meta).
    if (mesh.size(distributed::MeshDim::Tp) > 1) parallel::tp::apply_plan(model, mesh, config.sequence_parallel);
    staged->apply_pipeline_stage(blocks, s == 0, s == p - 1);
    if (built) {
        built->release_elsewhere(model);
        model.forward_hooks.reset(); // the pipeline runs it now
    }
    // Gradients averaged over the stage's dp_cp group: under cp its ranks hold the same rows' other positions,
    // and the loss's gradient is scaled for that average (context_parallel/loss.hpp), as without a pipeline.
    const bool sharded = sharding != nullptr && sharding->enabled();
    auto pipeline = std::make_shared<PipelineParallel>(*staged, group, config.num_micro_batches, config.pp_schedule,
                                                       sharded ? nullptr : mesh.group(distributed::MeshDim::DpCp), ddp);
    // pp x sharding: the engine over what the cut left (the other stages' parameters hold nothing), sharded over the
    // stage's dp_shard_cp group (the mesh lays the data-parallel dimensions inside each stage).
    if (sharded) pipeline->shard_with(std::make_shared<ShardedDataParallel>(model, mesh, *sharding), model);
    if (mesh.size(distributed::MeshDim::Cp) > 1) pipeline->set_context_parallel(mesh.group(distributed::MeshDim::Cp));
    // The model's forward() and generation run through the pipeline while it lives (the accelerator holds it).
    std::weak_ptr<PipelineParallel> weak = pipeline;
    staged->set_pipeline_forward(
        [weak](const at::Tensor &input, KvCache *cache) {
            const auto held = weak.lock();
            if (!held) fail(ACCEL_ERR_FAILED_PRECONDITION, "model: a pipeline stage whose accelerator was freed cannot run "
                                                           "the whole model");
            return held->forward(input, cache);
        },
        group);
    return pipeline;
}

std::vector<int32_t> PipelineParallel::owners()
{
    const auto &named = model_.stage_model().named_parameters();
    at::Tensor held = at::empty({static_cast<int64_t>(named.size())}, at::kLong);
    for (size_t i = 0; i < named.size(); ++i) held[static_cast<int64_t>(i)] = named[i].second.numel() > 0 ? 1 : 0;
    const std::vector<at::Tensor> holders = pp_->allgather(held);
    std::vector<int32_t> out;
    for (size_t i = 0; i < named.size(); ++i) {
        int32_t owner = 0;
        while (owner < num_stages() && holders[static_cast<size_t>(owner)][static_cast<int64_t>(i)].item<int64_t>() == 0) ++owner;
        if (owner == num_stages()) fail(ACCEL_ERR_INTERNAL, "pipeline: no stage holds " + named[i].first);
        out.push_back(owner);
    }
    return out;
}

std::vector<at::Tensor> PipelineParallel::borrow_other_stages(const std::vector<int32_t> &owner, bool keep)
{
    at::NoGradGuard no_grad;
    const auto &named = model_.stage_model().named_parameters();
    std::vector<at::Tensor> borrowed;
    for (size_t i = 0; i < named.size(); ++i) {
        at::Tensor p = named[i].second;
        at::Tensor values = from_owner(*pp_, p, owner[i], p.device());
        if (keep && owner[i] != stage() && p.numel() == 0) {
            p.set_data(values);
            borrowed.push_back(p);
        }
    }
    return borrowed;
}

void PipelineParallel::borrow_optimizer_state(AcceleratedOptimizer &optimizer, const std::vector<int32_t> &owner,
                                              const std::vector<at::Tensor> &borrowed)
{
    at::NoGradGuard no_grad;
    const auto &named = model_.stage_model().named_parameters();
    const std::unordered_set<const c10::TensorImpl *> wanted_set = impls_of(borrowed);
    for (size_t i = 0; i < named.size(); ++i) {
        const at::Tensor &p = named[i].second;
        const bool mine = owner[i] == stage();
        std::vector<at::Tensor> state = mine ? optimizer.param_state(p) : std::vector<at::Tensor>{};
        at::Tensor count = from_owner(*pp_, at::scalar_tensor(static_cast<int64_t>(state.size()), at::kLong), owner[i], at::kCPU);
        state.resize(static_cast<size_t>(count.item<int64_t>()));
        for (auto &t : state) t = from_owner(*pp_, t, owner[i], p.device());
        const bool wanted = wanted_set.count(p.unsafeGetTensorImpl()) != 0;
        if (!mine && wanted && !state.empty()) optimizer.set_param_state(p, state);
    }
}

WholeStages::WholeStages(PipelineParallel *pipeline, std::vector<AcceleratedOptimizer *> optimizers, bool gather_state)
{
    take(pipeline, std::move(optimizers), gather_state, true);
}

WholeStages::WholeStages(PipelineParallel *pipeline, std::vector<AcceleratedOptimizer *> optimizers, bool gather_state,
                         FirstStageOnly only)
{
    if (pipeline == nullptr) return;
    // The first stage's flag decides for the whole group (collective): the other groups exchange nothing.
    const at::Tensor mine = at::full({1}, only.near_writer ? 1 : 0, at::kLong);
    if (pipeline->pp_group()->allgather(mine).front().item<int64_t>() == 0) return;
    take(pipeline, std::move(optimizers), gather_state, pipeline->stage() == 0);
}

void WholeStages::take(PipelineParallel *pipeline, std::vector<AcceleratedOptimizer *> optimizers, bool gather_state, bool keep)
{
    if (pipeline == nullptr) return;
    optimizers_ = std::move(optimizers);
    const std::vector<int32_t> owners = pipeline->owners();
    borrowed_ = pipeline->borrow_other_stages(owners, keep);
    try {
        if (gather_state)
            for (auto *o : optimizers_) pipeline->borrow_optimizer_state(*o, owners, borrowed_);
    } catch (...) {
        release();
        throw;
    }
}

WholeStages::~WholeStages() { release(); }

void WholeStages::release() noexcept
{
    at::NoGradGuard no_grad;
    for (auto &p : borrowed_) {
        // The other stages' optimizer state (borrowed, or installed by a load) goes with their parameters.
        for (auto *o : optimizers_) {
            try {
                o->set_param_state(p, {});
            } catch (...) {
            }
        }
        p.set_data(at::empty({0}, p.options()));
    }
    borrowed_.clear();
}

} // namespace accel::parallel::pp
