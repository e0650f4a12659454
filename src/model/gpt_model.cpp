// GPT-2 as Hugging Face's modeling_gpt2.py computes it (eager attention):
//   h_0 = dropout(wte[ids] + wpe[pos])
//   per block: a = h + dropout(c_proj(attn(ln_1(h)))),  h' = a + dropout(mlp.c_proj(act(mlp.c_fc(ln_2(a)))))
//   attn: q, k, v = split(c_attn(x)); softmax(mask(q k^T / sqrt(head_dim))) v, heads merged
//   logits = ln_f(h_L) lm_head^T, lm_head = wte when tied
// Conv1D layers are y = addmm(bias, x, weight) with weight [in, out], exactly as HF's Conv1D (the linear
// seam's InOut layout, model/linear.hpp).
#include "model/gpt_model.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/activation_checkpoint.hpp"
#include "model/transformer_block.hpp"
#include "parallel/context_parallel/attention.hpp"
#include "parallel/context_parallel/loss.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/tensor_parallel/parallel_linear.hpp"
#include "parallel/tensor_parallel/block_plan.hpp"
#include "parallel/tensor_parallel/plan_linear.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/sequence_parallel_refusals.hpp"
#include "parallel/tensor_parallel/slicing.hpp"
#include "parallel/tensor_parallel/split_outputs.hpp"
#include "parallel/tensor_parallel/tp_plan.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"

#include <torch/csrc/autograd/generated/variable_factories.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

namespace accel {

// One GPT-2 block: accel's transformer block (pre-norm, causal) with HF's names for its parts: ln_1 = norm1,
// attn.c_attn = qkv, attn.c_proj = out_proj, ln_2 = norm2, mlp.c_fc = fc1, mlp.c_proj = fc2, the four
// Conv1D layers ([in, out] weights) behind the linear seam.
struct GptBlock {
    int64_t index = 0;
    TransformerBlock block;
    // In HF's named_parameters() order within transformer.h.<index>.
    std::vector<at::Tensor> params() const
    {
        const TransformerBlock &b = block;
        return {b.norm1_weight, b.norm1_bias, b.qkv->weight(), b.qkv->bias(), b.out_proj->weight(), b.out_proj->bias(),
                b.norm2_weight, b.norm2_bias, b.fc1->weight(), b.fc1->bias(), b.fc2->weight(),      b.fc2->bias()};
    }
    // What a recomputation takes as inputs: the parameters and any a decorator added to a linear (LoRA).
    std::vector<at::Tensor> checkpoint_params() const
    {
        std::vector<at::Tensor> out = params();
        for (const Linear *l : {block.qkv.get(), block.out_proj.get(), block.fc1.get(), block.fc2.get()})
            for (const auto &t : l->added_parameters()) out.push_back(t);
        return out;
    }
    bool random_linears() const
    {
        for (const Linear *l : {block.qkv.get(), block.out_proj.get(), block.fc1.get(), block.fc2.get()})
            if (l->random_forward()) return true;
        return false;
    }
    static const std::vector<std::string> &names()
    {
        static const std::vector<std::string> n = {
            "ln_1.weight",      "ln_1.bias",      "attn.c_attn.weight", "attn.c_attn.bias",
            "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
            "mlp.c_fc.weight",  "mlp.c_fc.bias",  "mlp.c_proj.weight",  "mlp.c_proj.bias"};
        return n;
    }
};

namespace {

at::Tensor maybe_dropout(const at::Tensor &x, double p, bool train) { return train && p > 0.0 ? at::dropout(x, p, true) : x; }

// One block. With `kv` (generation), its keys and values are appended to kv->first/second.
at::Tensor block_forward(const GptBlock &b, const at::Tensor &x, bool train, std::pair<at::Tensor, at::Tensor> *kv)
{
    return b.block.forward(x, train, kv);
}

// HF's GPT2Block as options of the shared block: pre-norm, causal, scores divided by sqrt(head_dim) and by
// the layer index + 1 as the config asks, dropout attn_pdrop on the weights and resid_pdrop on both branches.
TransformerBlockOptions block_options(const config::GptConfig &c, int64_t index)
{
    TransformerBlockOptions o;
    o.n_head = c.n_head;
    o.layer_norm_eps = c.layer_norm_epsilon;
    o.activation = c.activation_function;
    o.norm_first = true;
    o.causal = true;
    if (c.scale_attn_weights) o.score_divisors.push_back(std::sqrt(static_cast<double>(c.n_embd / c.n_head)));
    if (c.scale_attn_by_inverse_layer_idx) o.score_divisors.push_back(static_cast<double>(index + 1));
    o.attn_dropout = c.attn_pdrop;
    o.resid_dropout = c.resid_pdrop;
    return o;
}

at::Tensor normal(at::IntArrayRef sizes, double std)
{
    return at::empty(sizes, at::kFloat).normal_(0.0, std);
}

} // namespace

GptModel::GptModel(const config::GptConfig &config, const ParameterFn &on_parameter) : config_(config)
{
    // Each tensor is handed over as soon as it is made (before the next is drawn: the generator's sequence,
    // hence the weights, are those of a model built without it).
    auto made = [&on_parameter](const at::Tensor &t) {
        if (on_parameter) on_parameter(t);
        return t;
    };
    const auto &c = config_;
    const int64_t C = c.n_embd;
    // HF's GPT2PreTrainedModel._init_weights: Linear/Conv1D/Embedding weights ~ N(0, initializer_range),
    // biases 0, LayerNorm (1, 0); then every c_proj.weight ~ N(0, initializer_range / sqrt(2 n_layer))
    // (GPT-2 paper's scaling of residual projections).
    const double std = c.initializer_range;
    const double proj_std = c.n_layer > 0 ? std / std::sqrt(2.0 * static_cast<double>(c.n_layer)) : std;
    auto zeros = [](int64_t n) { return at::zeros({n}, at::kFloat); };
    auto ones = [](int64_t n) { return at::ones({n}, at::kFloat); };
    wte_ = made(normal({c.vocab_size, C}, std));
    wpe_ = made(normal({c.n_positions, C}, std));
    NamedTensors params = {{"transformer.wte.weight", wte_}, {"transformer.wpe.weight", wpe_}};
    for (int64_t i = 0; i < c.n_layer; ++i) {
        auto b = std::make_shared<GptBlock>();
        b->index = i;
        TransformerBlock &tb = b->block;
        tb.options = block_options(c, i);
        tb.options.recompute_attention = c.selective_recompute;
        // Drawn in HF's parameter order (the generator's sequence decides the weights).
        tb.norm1_weight = made(ones(C));
        tb.norm1_bias = made(zeros(C));
        at::Tensor c_attn_w = made(normal({C, 3 * C}, std)), c_attn_b = made(zeros(3 * C));
        at::Tensor attn_proj_w = made(normal({C, C}, proj_std)), attn_proj_b = made(zeros(C));
        tb.norm2_weight = made(ones(C));
        tb.norm2_bias = made(zeros(C));
        at::Tensor c_fc_w = made(normal({C, c.inner()}, std)), c_fc_b = made(zeros(c.inner()));
        at::Tensor mlp_proj_w = made(normal({c.inner(), C}, proj_std)), mlp_proj_b = made(zeros(C));
        tb.qkv = make_linear(c_attn_w, c_attn_b, Linear::Layout::InOut);
        tb.out_proj = make_linear(attn_proj_w, attn_proj_b, Linear::Layout::InOut);
        tb.fc1 = make_linear(c_fc_w, c_fc_b, Linear::Layout::InOut);
        tb.fc2 = make_linear(mlp_proj_w, mlp_proj_b, Linear::Layout::InOut);
        const auto p = b->params();
        for (size_t k = 0; k < p.size(); ++k)
            params.emplace_back("transformer.h." + std::to_string(i) + "." + GptBlock::names()[k], p[k]);
        blocks_.push_back(std::move(b));
    }
    ln_f_w_ = made(ones(C));
    ln_f_b_ = made(zeros(C));
    params.emplace_back("transformer.ln_f.weight", ln_f_w_);
    params.emplace_back("transformer.ln_f.bias", ln_f_b_);
    if (c.tie_word_embeddings) {
        lm_head_ = wte_;
    } else {
        lm_head_ = made(normal({c.vocab_size, C}, std));
        params.emplace_back("lm_head.weight", lm_head_);
    }
    for (auto &p : params) p.second.requires_grad_(true);
    lm_head_linear_ = make_linear(lm_head_, {}, Linear::Layout::OutIn);
    checkpointed_.assign(static_cast<size_t>(c.n_layer), c.activation_checkpointing);
    block_end_ = blocks_.size();
    set_tensors(std::move(params), {});
}

GptModel::~GptModel() = default;

at::Tensor GptModel::forward(const at::Tensor &input)
{
    if (pipelined()) return through_pipeline(input, nullptr, "forward");
    return run(input, nullptr);
}

// Under tensor parallelism the cache holds this rank's heads, as the blocks compute them.
at::Tensor GptModel::forward_cached(const at::Tensor &input, GptKvCache &cache)
{
    // A pipeline stage's generation runs the whole model through the stages (collective over the pp group).
    const auto step = [&] { return pipelined() ? through_pipeline(input, &cache, "generation") : run(input, &cache); };
    if (!cp_) return step();
    // Generation under context parallelism is not split: every rank runs the whole prompt and its cache as one
    // process does, the cp group set aside for the call (training's forward keeps it). Under pp x cp every rank
    // sets its own stage's aside (generation is collective), so the stages pass whole sequences.
    const auto cp = cp_;
    auto restore = [&] {
        for (const auto &b : blocks_) b->block.options.context_parallel = cp;
        cp_ = cp;
    };
    for (const auto &b : blocks_) b->block.options.context_parallel = nullptr;
    cp_ = nullptr;
    try {
        at::Tensor out = step();
        restore();
        return out;
    } catch (...) {
        restore();
        throw;
    }
}

at::Tensor GptModel::forward_stage(const at::Tensor &input, KvCache *cache)
{
    if (!pipelined()) fail(ACCEL_ERR_INTERNAL, "gpt: forward_stage without a pipeline stage");
    if (!stage_first_ && (!input.defined() || input.dim() != 3 || input.size(2) != config_.n_embd))
        fail(ACCEL_ERR_INTERNAL, "gpt: a later pipeline stage takes hidden states [B, T, n_embd]");
    return run(input, cache);
}

// The first stage's input: token ids checked, then token + position embeddings (dropout in training).
at::Tensor GptModel::embed(const at::Tensor &ids, int64_t past, bool train)
{
    const auto &c = config_;
    if (ids.numel() > 0) {
        auto [lo, hi] = at::aminmax(ids);
        const int64_t l = lo.item<int64_t>(), h = hi.item<int64_t>();
        if (l < 0 || h >= c.vocab_size)
            fail(ACCEL_ERR_OUT_OF_RANGE, "input: token id " + std::to_string(l < 0 ? l : h) + " is outside [0, " +
                                             std::to_string(c.vocab_size) + ")");
    }
    at::Tensor pos = cp_ ? parallel::cp::sequence_positions(ids.size(1), cp_->rank(), cp_->size(), ids.options())
                         : at::arange(past, past + ids.size(1), ids.options().dtype(at::kLong));
    at::Tensor tokens = tp_group_ ? parallel::tp::vocab_parallel_embedding(ids, wte_, vocab_start_, tp_group_)
                                  : at::embedding(wte_, ids);
    at::Tensor h = tokens + at::embedding(wpe_, pos);
    // Sequence parallelism: from here to the head each rank holds its 1/tp of the positions.
    if (!sequence_parallel_ || !tp_group_) return maybe_dropout(h, c.embd_pdrop, train); // replicated: one mask
    h = parallel::tp::scatter_sequence(h, tp_group_, 1);
    return parallel::tp::region_dropout(h, c.embd_pdrop, train, tp_dropout_); // this rank's positions: its own mask
}

at::Tensor GptModel::run(const at::Tensor &input, GptKvCache *cache)
{
    const auto &c = config_;
    if (!input.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "input: missing");
    const bool ids_in = stage_first_; // a later pipeline stage receives hidden states [B, T, C]
    if (ids_in && input.scalar_type() != at::kLong && input.scalar_type() != at::kInt)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input: a gpt model takes token ids (int64 or int32), got ") +
                                             c10::toString(input.scalar_type()));
    if (ids_in && input.dim() != 1 && input.dim() != 2)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: a gpt model takes token ids [batch, seq] or [seq], got shape " +
                                             c10::str(input.sizes()));
    const bool unbatched = ids_in && input.dim() == 1;
    at::Tensor ids = unbatched ? input.unsqueeze(0) : input;
    const int64_t T = ids.size(1);
    const int64_t past = cache == nullptr ? 0 : cached_positions(*cache);
    if (T < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "input: empty sequence");
    // Under context parallelism `ids` is this rank's part: two chunks of the whole sequence.
    if (cp_) parallel::cp::check_model_input(T, cache != nullptr, "gpt");
    // A later pipeline stage receives the positions already split (its T is this rank's share).
    if (ids_in && sequence_parallel()) parallel::tp::check_sequence_split(T, cache != nullptr, tp_group_->size(), "gpt");
    const int64_t whole = cp_ ? T * cp_->size() : T;
    if (past + whole > c.n_positions)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: " + std::to_string(past + whole) + " positions" +
                                             (past > 0 ? " (" + std::to_string(past) + " cached)" : std::string()) +
                                             " exceed n_positions " + std::to_string(c.n_positions));
    if (cache != nullptr && cache->keys.size() != blocks_.size()) {
        if (!cache->keys.empty()) fail(ACCEL_ERR_INTERNAL, "gpt: KV cache of another model");
        cache->keys.resize(blocks_.size());
        cache->values.resize(blocks_.size());
    }
    const bool train = training_ && cache == nullptr;
    ForwardHooks *hooks = forward_hooks.get(); // a sharding engine's: gather a layer's parameters, free them after
    if (hooks) hooks->before_layer(0);
    at::Tensor h = ids_in ? embed(ids, past, train) : input;
    const bool checkpoint = cache == nullptr && at::GradMode::is_enabled();
    for (size_t i = block_begin_; i < block_end_; ++i) {
        if (hooks) hooks->before_layer(i + 1);
        if (checkpoint && checkpointed_[i]) {
            std::shared_ptr<const GptBlock> block = blocks_[i];
            // The rerun draws the split regions' masks again: the tp generator goes back to its state of the first
            // run with the default one.
            std::vector<ExtraGenerator> extra;
            if (train && tp_dropout_) extra.push_back(parallel::tp::checkpoint_generator(tp_dropout_));
            h = checkpoint_layer(h, block->checkpoint_params(),
                                 [block, train](const at::Tensor &x) { return block_forward(*block, x, train, nullptr); },
                                 train && (c.attn_pdrop > 0.0 || c.resid_pdrop > 0.0 || block->random_linears()),
                                 std::move(extra));
        } else if (cache != nullptr) {
            std::pair<at::Tensor, at::Tensor> kv{cache->keys[i], cache->values[i]};
            h = block_forward(*blocks_[i], h, false, &kv);
            cache->keys[i] = kv.first;
            cache->values[i] = kv.second;
        } else {
            h = block_forward(*blocks_[i], h, train, nullptr);
        }
        if (hooks) h = hooks->after_layer(i + 1, h);
    }
    if (!stage_last_) return h;
    h = sequence_parallel_ && tp_group_
            ? at::layer_norm(h, {c.n_embd}, parallel::tp::copy_to_region(ln_f_w_, tp_group_),
                             parallel::tp::copy_to_region(ln_f_b_, tp_group_), c.layer_norm_epsilon)
            : at::layer_norm(h, {c.n_embd}, ln_f_w_, ln_f_b_, c.layer_norm_epsilon);
    at::Tensor logits = lm_head_linear_->forward(h);
    if (hooks) logits = hooks->after_layer(0, logits);
    if (unbatched) logits = logits.squeeze(0);
    mark_logits(logits);
    return logits;
}

void GptModel::mark_logits(const at::Tensor &logits) const
{
    if (tp_group_) parallel::tp::mark_vocab_parallel(logits, {tp_group_, vocab_start_, config_.vocab_size});
    if (cp_) parallel::cp::mark_context_parallel(logits, cp_->group);
}

void GptModel::apply_context_parallel(std::shared_ptr<const parallel::cp::ContextParallel> cp)
{
    if (!cp || !cp->group) fail(ACCEL_ERR_INTERNAL, "gpt: context parallelism without a group");
    if (cp_) fail(ACCEL_ERR_FAILED_PRECONDITION, "gpt: context parallelism is already applied");
    if (cp->size() == 1) return;
    if (config_.selective_recompute)
        fail(ACCEL_ERR_UNIMPLEMENTED, "gpt: recompute_granularity \"selective\" under context parallelism (cp_size > 1) "
                                      "is not built yet; use activation_checkpointing (\"full\")");
    for (const auto &b : blocks_) b->block.options.context_parallel = cp;
    cp_ = std::move(cp);
}

void GptModel::apply_pipeline_stage(int64_t first_block, int64_t end_block, bool first, bool last)
{
    apply_pipeline_stage({{first_block, end_block}}, first, last);
}

void GptModel::apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last)
{
    cut_stage(*this, "gpt", chunks, first, last, blocks_.size(), [this](size_t i) { return blocks_[i]->checkpoint_params(); },
              {wte_, wpe_}, {ln_f_w_, ln_f_b_, lm_head_});
}

parallel::pp::PipelineStageModel::Shape GptModel::pipeline_shape() const
{
    return {"gpt", config_.n_embd, config_.vocab_size, config_.n_positions, "n_positions"};
}

// GPT's blocks are equal: an even cut, the remainder early.
std::vector<int64_t> GptModel::block_costs() const { return costs_by_name(*this, "transformer.h.", blocks_.size()); }

// The gpt's plan as tp_plan.hpp lists it: per block two regions (attention 2i, MLP 2i + 1), the rest fixed.
std::vector<parallel::tp::PlanModule> GptModel::plan_modules() const
{
    using config::TpStyle;
    const TpStyle norm = sequence_parallel_ ? TpStyle::SequenceParallel : TpStyle::Replicate;
    std::vector<parallel::tp::PlanModule> m;
    m.push_back({"transformer.wte", TpStyle::Rowwise, {}}); // vocabulary-parallel
    m.push_back({"transformer.wpe", TpStyle::Replicate, {}});
    for (const auto &b : blocks_) {
        const std::string h = "transformer.h." + std::to_string(b->index) + ".";
        const int attn = static_cast<int>(2 * b->index), mlp = attn + 1;
        m.push_back({h + "ln_1", norm, {}});
        m.push_back({h + "attn.c_attn", TpStyle::Colwise, {}, attn});
        m.push_back({h + "attn.c_proj", TpStyle::Rowwise, {}, attn, true});
        m.push_back({h + "ln_2", norm, {}});
        m.push_back({h + "mlp.c_fc", TpStyle::Colwise, {}, mlp});
        m.push_back({h + "mlp.c_proj", TpStyle::Rowwise, {}, mlp, true});
    }
    m.push_back({"transformer.ln_f", norm, {}});
    // transformers names its head colwise_rep (logits gathered); accel keeps them split for the vocabulary-parallel
    // loss, which no rank needs whole: the same weights.
    m.push_back({"lm_head", TpStyle::ColwiseRep, {TpStyle::Colwise}});
    return m;
}

void GptModel::apply_tensor_parallel(const std::shared_ptr<distributed::Communicator> &group)
{
    namespace tp = parallel::tp;
    using Layout = Linear::Layout;
    if (!group) fail(ACCEL_ERR_INTERNAL, "gpt: tensor parallelism without a group");
    if (tp_group_) fail(ACCEL_ERR_FAILED_PRECONDITION, "gpt: tensor parallelism is already applied");
    // pp x tp slices the whole model first: a stage's emptied parameters have nothing left to slice.
    if (pipelined()) fail(ACCEL_ERR_INTERNAL, "gpt: tensor parallelism after the pipeline cut");
    const auto &c = config_;
    const int64_t n = group->size(), r = group->rank();
    const tp::ResolvedPlan resolved =
        tp::resolve_plan(plan_modules(), static_cast<int>(2 * blocks_.size()), tp_plan(), "transformer.");
    tp::refuse_unbuilt_sequence_parallel(sequence_parallel_, cp_ != nullptr, resolved.overridden);
    auto split_of_block = [&](const GptBlock &b) {
        return tp::BlockSplit{resolved.region_split[2 * b.index], resolved.region_split[2 * b.index + 1]};
    };
    auto names = [](const GptBlock &b) {
        const std::string h = "transformer.h." + std::to_string(b.index) + ".";
        return tp::BlockModules{h + "attn.c_attn", h + "attn.c_proj", h + "mlp.c_fc", h + "mlp.c_proj"};
    };
    // Sequence parallelism: the activations between the layers are [B, T / tp, C], split along dimension 1.
    tp::LinearPlanOptions layer;
    if (sequence_parallel_) layer.column.sequence_dim = layer.row.sequence_dim = 1;
    for (const auto &b : blocks_) tp::check_block(b->block, names(*b), split_of_block(*b), n, "n_head", "n_inner", layer);
    if (n == 1) return;
    at::NoGradGuard no_grad;
    std::map<std::string, tp::ParameterSlicing> plan;
    // Narrows `t` in place (the model's registered tensor keeps its identity) and records how.
    auto narrow = [&](const std::string &name, const at::Tensor &t, int64_t dim, int64_t groups) {
        tp::ParameterSlicing s{dim, groups, t.size(dim)};
        at::Tensor part = tp::slice_parameter(t, s, r, n);
        at::Tensor mutable_t = t;
        mutable_t.set_data(part);
        plan[name] = s;
    };
    // Dropout in the split regions draws from this rank's generator (rng_tracker.hpp), seeded from set_seed's.
    auto tp_dropout = tp::make_dropout_generator(r);
    for (const auto &b : blocks_) {
        // block_plan.hpp splits the linears (and LoRA adapters on them; fp8 ones refused by name).
        tp::parallelize_block(b->block, names(*b), split_of_block(*b), group, plan, layer, tp_dropout);
        if (sequence_parallel_) b->block.options.sequence_parallel = group;
    }
    const int64_t padded = tp::padded_vocab_size(c.vocab_size, n);
    narrow("transformer.wte.weight", wte_, 0, 1);
    if (!c.tie_word_embeddings) narrow("lm_head.weight", lm_head_, 0, 1);
    lm_head_linear_ = tp::make_column_parallel_linear(make_linear(lm_head_, {}, Layout::OutIn), group, layer.column);
    vocab_start_ = r * (padded / n);
    tp_group_ = group;
    tp_dropout_ = std::move(tp_dropout);
    tp_slicing_ = std::move(plan);
}

std::vector<ModuleUnit> GptModel::units() const
{
    std::vector<ModuleUnit> out;
    out.push_back({"transformer.wte", "embedding", {"transformer.wte.weight"}});
    out.push_back({"transformer.wpe", "embedding", {"transformer.wpe.weight"}});
    for (size_t i = 0; i < blocks_.size(); ++i) {
        ModuleUnit u{"transformer.h." + std::to_string(i), "gpt_block", {}};
        for (const auto &n : GptBlock::names()) u.parameter_names.push_back(u.name + "." + n);
        out.push_back(std::move(u));
    }
    out.push_back({"transformer.ln_f", "layer_norm", {"transformer.ln_f.weight", "transformer.ln_f.bias"}});
    // Tied: the head's weight belongs to transformer.wte (listed there).
    out.push_back({"lm_head", "linear", config_.tie_word_embeddings ? std::vector<std::string>{}
                                                                     : std::vector<std::string>{"lm_head.weight"}});
    return with_inserted_parameters(std::move(out));
}

std::vector<LinearSlot> GptModel::linear_slots()
{
    std::vector<LinearSlot> out;
    for (size_t i = 0; i < blocks_.size(); ++i) {
        const std::string h = "transformer.h." + std::to_string(i) + ".";
        TransformerBlock &b = blocks_[i]->block;
        out.push_back({h + "attn.c_attn", &b.qkv, i + 1});
        out.push_back({h + "attn.c_proj", &b.out_proj, i + 1});
        out.push_back({h + "mlp.c_fc", &b.fc1, i + 1});
        out.push_back({h + "mlp.c_proj", &b.fc2, i + 1});
    }
    return out;
}

void GptModel::set_activation_checkpointing(const std::vector<bool> &layers)
{
    for (size_t i = 0; i < checkpointed_.size(); ++i) checkpointed_[i] = i + 1 < layers.size() && layers[i + 1];
}

bool GptModel::activation_checkpointing() const
{
    return std::find(checkpointed_.begin(), checkpointed_.end(), true) != checkpointed_.end();
}

std::vector<std::string> GptModel::layer_types() const
{
    std::vector<std::string> out{"gpt_embeddings_and_head"};
    out.insert(out.end(), blocks_.size(), "gpt_block");
    return out;
}

std::vector<size_t> GptModel::parameter_layers() const
{
    static const std::string prefix = "transformer.h.";
    std::vector<size_t> out;
    for (const auto &p : named_parameters()) {
        size_t layer = 0;
        if (p.first.compare(0, prefix.size(), prefix) == 0)
            layer = 1 + static_cast<size_t>(std::stoul(p.first.substr(prefix.size())));
        out.push_back(layer);
    }
    return out;
}

std::string GptModel::canonical_key(const std::string &key) const
{
    if (config_.tie_word_embeddings && key == "lm_head.weight") return "transformer.wte.weight";
    static const std::string prefix = "transformer.";
    const bool prefixed = key.compare(0, prefix.size(), prefix) == 0;
    const std::string bare = prefixed ? key.substr(prefix.size()) : key;
    // HF's attention mask buffers (attn.bias, attn.masked_bias), stored by older transformers versions:
    // the mask is recomputed, so they are not needed (HF ignores them on load too).
    auto ends_with = [&](const std::string &s) {
        return bare.size() >= s.size() && bare.compare(bare.size() - s.size(), s.size(), s) == 0;
    };
    if (bare.compare(0, 2, "h.") == 0 && (ends_with(".attn.bias") || ends_with(".attn.masked_bias"))) return "";
    // A GPT2Model checkpoint (openai-community/gpt2's files): the same names without "transformer.".
    if (!prefixed && key.compare(0, 8, "lm_head.") != 0) return prefix + key;
    return key;
}

void GptModel::set_selective_recompute(bool on)
{
    config_.selective_recompute = on;
    for (const auto &b : blocks_) b->block.options.recompute_attention = on;
}

} // namespace accel
