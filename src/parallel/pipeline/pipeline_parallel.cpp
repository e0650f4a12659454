#include "parallel/pipeline/pipeline_parallel.hpp"

#include "common/error.hpp"
#include "config/parallelism_config.hpp"
#include "distributed/communicator.hpp"
#include "distributed/device_mesh.hpp"
#include "model/gpt_model.hpp"
#include "parallel/ddp.hpp"
#include "parallel/pipeline/schedule.hpp"
#include "parallel/pipeline/stages.hpp"
#include "parallel/whole_gradients.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <string>

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

} // namespace

PipelineParallel::PipelineParallel(GptModel &model, std::shared_ptr<distributed::Communicator> pp_group,
                                   int32_t num_micro_batches, std::string schedule,
                                   std::shared_ptr<distributed::Communicator> dp_group,
                                   const config::DistributedDataParallelKwargs *ddp)
    : model_(model), pp_(std::move(pp_group)), micro_batches_(num_micro_batches), schedule_(std::move(schedule))
{
    // An unknown name (or micro-batches interleaving cannot group) fails here, not at the first step.
    stage_schedule(schedule_, stage(), num_stages(), micro_batches_, chunks());
    std::vector<std::pair<std::string, at::Tensor>> named;
    for (const auto &np : model_.named_parameters())
        if (np.second.numel() > 0) {
            params_.push_back(np.second);
            named.push_back(np);
        }
    if (dp_group && dp_group->size() > 1) {
        const config::DistributedDataParallelKwargs defaults;
        dp_ = std::make_shared<DistributedDataParallel>(std::move(named), std::vector<std::pair<std::string, at::Tensor>>{},
                                                        std::move(dp_group), ddp != nullptr ? *ddp : defaults);
    }
    const bool first = stage() == 0, last = stage() == num_stages() - 1;
    if (model_.config().tie_word_embeddings && num_stages() > 1 && (first || last))
        tied_ = model_.named_parameters().front().second; // transformer.wte.weight, the head's weight too
}

int32_t PipelineParallel::stage() const { return pp_->rank(); }
int32_t PipelineParallel::chunks() const { return static_cast<int32_t>(model_.pipeline_chunks()); }
int32_t PipelineParallel::num_stages() const { return pp_->size(); }

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
    if (!inputs.defined() || inputs.dim() != 2)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "batch: a pipeline-parallel gpt model takes token ids [batch, seq], got " +
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
    const std::vector<int64_t> hidden{rows, inputs.size(1), model_.config().n_embd};

    // Per micro-batch: the activation received (whose gradient goes back), the stage's output (the scaled
    // loss on the last stage) and the gradient received for it; each is dropped once used.
    // Interleaved: per micro-batch and chunk (micro * chunks + chunk).
    const auto slots = static_cast<size_t>(m * v);
    std::vector<at::Tensor> received(slots), outputs(slots), grads(slots);
    at::Tensor loss_sum = at::zeros({}, at::kDouble);
    int64_t live = 0;
    times_.peak_live = 0;
    const std::vector<Op> ops = stage_schedule(schedule_, s, p, m, v);
    // Each chunk's last backward: its parameters' gradients are final there (DDP synchronises them then).
    std::vector<size_t> last_backward(static_cast<size_t>(v), 0);
    for (size_t k = 0; k < ops.size(); ++k)
        if (ops[k].kind == OpKind::Backward) last_backward[static_cast<size_t>(ops[k].chunk)] = k;
    for (size_t k = 0; k < ops.size(); ++k) {
        const Op &op = ops[k];
        const auto i = static_cast<size_t>(op.micro * v + op.chunk);
        const bool loss_here = last && op.chunk == v - 1;
        const VirtualStage prev = previous_virtual_stage(s, op.chunk, p), next = next_virtual_stage(s, op.chunk, p);
        switch (op.kind) {
        case OpKind::RecvActivation:
            received[i] = at::empty(hidden, wire);
            pp_->recv(received[i], prev.stage, forward_tag(chunk_message(op, prev.chunk, v)));
            received[i].requires_grad_(true);
            break;
        case OpKind::Forward:
            model_.select_pipeline_chunk(static_cast<size_t>(op.chunk));
            timed([&] {
                at::Tensor y = model_.forward_stage(received[i].defined() ? received[i] : inputs.narrow(0, op.micro * rows, rows));
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
            pp_->send(outputs[i].detach().to(kWire).contiguous(), next.stage, forward_tag(chunk_message(op, op.chunk, v)));
            break;
        case OpKind::RecvGrad:
            grads[i] = at::empty(hidden, wire);
            pp_->recv(grads[i], next.stage, backward_tag(chunk_message(op, next.chunk, v)));
            break;
        case OpKind::Backward:
            // DDP's no_sync on every backward but the last of each chunk (the gradients summed locally first).
            if (dp_) dp_->set_require_sync(require_sync_ && k == last_backward[static_cast<size_t>(op.chunk)]);
            timed([&] {
                if (loss_here) outputs[i].backward();
                else outputs[i].backward(grads[i].to(outputs[i].scalar_type()));
            });
            outputs[i] = grads[i] = at::Tensor(); // this micro-batch's activations go now
            --live;
            break;
        case OpKind::SendGrad:
            pp_->send(received[i].grad().contiguous(), prev.stage, backward_tag(chunk_message(op, op.chunk, v)));
            received[i] = at::Tensor();
            break;
        }
    }
    if (dp_ && require_sync_) dp_->finish_backward(); // the stage's gradients averaged over its replicas
    if (require_sync_) sync_tied_gradient();
    at::Tensor mean = (loss_sum / static_cast<double>(m)).reshape({1});
    pp_->broadcast(mean, p - 1); // every rank reports the loss
    times_.wall = distributed::now_seconds() - start;
    times_.busy = busy;
    return mean.item<double>();
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

// torch's clip_grad_norm_ over the whole model: each stage's part of the norm (the tied embedding once),
// reduced over the pp group, then every stage scales its gradients alike.
double PipelineParallel::clip_grad_norm(double max_norm, double norm_type, bool clip)
{
    at::NoGradGuard no_grad;
    const bool inf = std::isinf(norm_type);
    at::Tensor acc = at::zeros({1}, at::kDouble);
    for (const auto &t : counted_parameters()) {
        if (!t.grad().defined()) continue;
        at::Tensor g = t.grad().to(at::kDouble).cpu();
        acc = inf ? at::maximum(acc, g.abs().max().reshape({1})) : acc + g.abs().pow(norm_type).sum();
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

void PipelineParallel::clip_grad_value(double clip_value) { whole_clip_grad_value(params_, clip_value); }

WrapperMemory PipelineParallel::memory() const { return whole_memory(params_); }

std::shared_ptr<PipelineParallel> prepare_pipeline(Model &model, const distributed::DeviceMesh &mesh,
                                                   const config::ParallelismConfig &config,
                                                   const config::DistributedDataParallelKwargs *ddp)
{
    auto *gpt = dynamic_cast<GptModel *>(&model);
    if (gpt == nullptr)
        fail(ACCEL_ERR_UNIMPLEMENTED, "parallelism_config.pp_size: pipeline parallelism has a plan for the gpt model only; "
                                      "other model types are not built yet");
    const auto &group = mesh.group(distributed::MeshDim::Pp);
    const int32_t p = group->size(), s = group->rank();
    const int64_t n = gpt->config().n_layer;
    // Interleaved: chunks virtual stages per rank, virtual stage c * p + s being this rank's chunk c.
    const int32_t chunks = config.pp_schedule == "interleaved_1f1b"
                               ? chunks_per_stage(config.num_layers_per_virtual_pipeline_stage,
                                                  config.num_virtual_stages_per_pipeline_rank, n, p)
                               : 1;
    const int32_t virtual_stages = p * chunks;
    std::vector<int64_t> starts;
    if (!config.pp_split_points.empty()) {
        starts = stage_starts_from_split_points(config.pp_split_points, n, virtual_stages);
    } else {
        // Balanced by the blocks' parameter counts (GPT's are equal: an even cut, the remainder early).
        std::vector<int64_t> costs(static_cast<size_t>(n), 0);
        const std::string prefix = "transformer.h.";
        for (const auto &[name, t] : gpt->named_parameters())
            if (name.compare(0, prefix.size(), prefix) == 0)
                costs[std::stoul(name.substr(prefix.size()))] += t.numel();
        starts = balanced_stage_starts(costs, virtual_stages);
    }
    std::vector<std::pair<int64_t, int64_t>> blocks;
    for (int32_t c = 0; c < chunks; ++c) {
        const auto vs = static_cast<size_t>(c * p + s);
        blocks.emplace_back(starts[vs], vs + 1 < starts.size() ? starts[vs + 1] : n);
    }
    gpt->apply_pipeline_stage(blocks, s == 0, s == p - 1);
    return std::make_shared<PipelineParallel>(*gpt, group, config.num_micro_batches, config.pp_schedule,
                                              mesh.group(distributed::MeshDim::Dp), ddp);
}

std::vector<at::Tensor> PipelineParallel::borrow_other_stages()
{
    at::NoGradGuard no_grad;
    const auto &named = model_.named_parameters();
    at::Tensor held = at::empty({static_cast<int64_t>(named.size())}, at::kLong);
    for (size_t i = 0; i < named.size(); ++i) held[static_cast<int64_t>(i)] = named[i].second.numel() > 0 ? 1 : 0;
    const std::vector<at::Tensor> holders = pp_->allgather(held);
    std::vector<at::Tensor> borrowed;
    constexpr int64_t kMaxDims = 8;
    for (size_t i = 0; i < named.size(); ++i) {
        at::Tensor p = named[i].second;
        int32_t owner = 0;
        while (owner < num_stages() && holders[static_cast<size_t>(owner)][static_cast<int64_t>(i)].item<int64_t>() == 0) ++owner;
        if (owner == num_stages()) fail(ACCEL_ERR_INTERNAL, "pipeline: no stage holds " + named[i].first);
        // The owner's shape first (the others' copy has none), then its values.
        at::Tensor shape = at::zeros({kMaxDims + 1}, at::kLong);
        if (owner == stage()) {
            if (p.dim() > kMaxDims) fail(ACCEL_ERR_INTERNAL, "pipeline: " + named[i].first + " has too many dimensions");
            shape[0] = p.dim();
            for (int64_t d = 0; d < p.dim(); ++d) shape[d + 1] = p.size(d);
        }
        pp_->broadcast(shape, owner);
        at::Tensor values = owner == stage() ? p.detach().contiguous()
                                             : at::empty(std::vector<int64_t>(shape.data_ptr<int64_t>() + 1,
                                                                              shape.data_ptr<int64_t>() + 1 + shape[0].item<int64_t>()),
                                                         p.options());
        pp_->broadcast(values, owner);
        if (owner != stage() && p.numel() == 0) {
            p.set_data(values);
            borrowed.push_back(p);
        }
    }
    return borrowed;
}

WholeStages::WholeStages(PipelineParallel *pipeline)
{
    if (pipeline != nullptr) borrowed_ = pipeline->borrow_other_stages();
}

WholeStages::~WholeStages()
{
    at::NoGradGuard no_grad;
    for (auto &p : borrowed_) p.set_data(at::empty({0}, p.options()));
}

void refuse_checkpoint_of_pipeline_model(const Model &model, const char *what)
{
    const auto *gpt = dynamic_cast<const GptModel *>(&model);
    if (gpt != nullptr && gpt->pipelined())
        fail(ACCEL_ERR_UNIMPLEMENTED, std::string(what) + ": checkpoints of a pipeline-parallel model (pp_size > 1: each "
                                                          "rank holds one stage's optimizer state; gathering it) are not "
                                                          "built yet; save_model and get_state_dict write the whole weights");
}

} // namespace accel::parallel::pp
