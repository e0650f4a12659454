// The Llama family as transformers' modeling_llama.py computes it (eager attention), Mistral's sliding window and
// Qwen2's q/k/v biases included:
//   h = embed_tokens[ids]
//   per layer: h = h + o_proj(attn(rms(h; input_layernorm)));  h = h + down(act(gate(x)) * up(x)), x = rms(h; post_..)
//   attn: q, k, v projections split in heads, rotary embedding on q and k, k and v heads repeated
//         num_attention_heads / num_key_value_heads times, softmax(mask(q kᵀ · head_dim^-½)) (in float32) v
//   logits = lm_head(rms(h; norm))
// tests/python/llama_reference.py writes the same equations with the same operations in the same order (so that
// with one thread the two agree bit for bit); its header has the rotary scaling rules.
#include "model/llama_model.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/activation_checkpoint.hpp"
#include "model/transformer_block.hpp" // activation()
#include "parallel/context_parallel/attention.hpp"
#include "parallel/context_parallel/loss.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/tensor_parallel/plan_linear.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"
#include "parallel/tensor_parallel/sequence_parallel_refusals.hpp"
#include "parallel/tensor_parallel/split_outputs.hpp"
#include "parallel/tensor_parallel/tp_plan.hpp"
#include "parallel/tensor_parallel/vocab_parallel.hpp"

#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace accel {

struct LlamaLayer {
    int64_t index = 0;
    std::shared_ptr<Linear> q, k, v, o, gate, up, down;
    at::Tensor input_norm, post_norm;
    int64_t window = 0; // sliding window (0: none)
    int64_t tp_size = 1; // tensor parallelism: the layer computes 1/tp_size of the heads (apply_tensor_parallel)
    bool recompute_attention = false; // recompute_granularity "selective" (LlamaConfig::selective_recompute)
    // Tensor parallelism: the rank's generator for the attention dropout of its heads (a split region, rng_tracker.hpp);
    // null while the attention is whole (tp 1 or replicated by a tp_plan override): the default generator.
    std::shared_ptr<parallel::tp::DropoutGenerator> tp_dropout;
    // Sequence parallelism (set_sequence_parallel): the tp group over which h holds 1/tp of the positions; null: off.
    std::shared_ptr<distributed::Communicator> sequence_parallel;

    // In transformers' named_parameters() order within model.layers.<index>, with their names.
    NamedTensors named(const std::string &prefix) const
    {
        NamedTensors out;
        auto add = [&](const char *name, const std::shared_ptr<Linear> &l) {
            out.emplace_back(prefix + name + ".weight", l->weight());
            if (l->bias().defined()) out.emplace_back(prefix + name + ".bias", l->bias());
        };
        add("self_attn.q_proj", q);
        add("self_attn.k_proj", k);
        add("self_attn.v_proj", v);
        add("self_attn.o_proj", o);
        add("mlp.gate_proj", gate);
        add("mlp.up_proj", up);
        add("mlp.down_proj", down);
        out.emplace_back(prefix + "input_layernorm.weight", input_norm);
        out.emplace_back(prefix + "post_attention_layernorm.weight", post_norm);
        return out;
    }
    std::vector<const Linear *> linears() const
    {
        return {q.get(), k.get(), v.get(), o.get(), gate.get(), up.get(), down.get()};
    }
    // What a recomputation takes as inputs: the parameters and any a decorator added to a linear (LoRA's).
    std::vector<at::Tensor> checkpoint_params() const
    {
        std::vector<at::Tensor> out;
        for (auto &p : named("")) out.push_back(p.second);
        for (const Linear *l : linears())
            for (const auto &t : l->added_parameters()) out.push_back(t);
        return out;
    }
    bool random_linears() const
    {
        for (const Linear *l : linears())
            if (l->random_forward()) return true;
        return false;
    }
};

namespace {

// LlamaRMSNorm: in float32, cast back to the input's dtype before the weight.
at::Tensor rms_norm(const at::Tensor &x, const at::Tensor &w, double eps)
{
    at::Tensor x32 = x.to(at::kFloat);
    at::Tensor var = x32.pow(2).mean(-1, true);
    return w * (x32 * at::rsqrt(var + eps)).to(x.scalar_type());
}

// A norm's weight under sequence parallelism: each rank normalises its own positions, so the weight's gradient is
// summed over the group in backward (copy_to_region: identity forward).
at::Tensor sp_weight(const at::Tensor &w, const std::shared_ptr<distributed::Communicator> &sp)
{
    return sp ? parallel::tp::copy_to_region(w, sp) : w;
}

at::Tensor rotate_half(const at::Tensor &x)
{
    auto halves = x.chunk(2, -1);
    return at::cat({-halves[1], halves[0]}, -1);
}

at::Tensor apply_rope(const at::Tensor &x, const at::Tensor &cos, const at::Tensor &sin)
{
    return x * cos + rotate_half(x) * sin;
}

// 1 / theta^(2j / dim), j < dim / 2, in float32 (modeling_rope_utils' default rule).
at::Tensor base_inv_freq(double theta, int64_t dim)
{
    at::Tensor exps = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
    return at::reciprocal(at::pow(theta, exps));
}

// inv_freq under config.rope_scaling for a forward whose sequence length (as dynamic_rope_update keeps it) is
// `seq_len`.
at::Tensor scaled_inv_freq(const config::LlamaConfig &c, int64_t seq_len)
{
    const auto &rs = c.rope_scaling;
    const int64_t dim = c.head_dim;
    if (rs.type == "linear") return base_inv_freq(c.rope_theta, dim) / rs.factor;
    if (rs.type == "dynamic") {
        const double m = static_cast<double>(c.max_position_embeddings);
        const double s = static_cast<double>(std::max(seq_len, c.max_position_embeddings));
        const double theta = c.rope_theta * std::pow(rs.factor * s / m - (rs.factor - 1.0),
                                                     static_cast<double>(dim) / static_cast<double>(dim - 2));
        return base_inv_freq(theta, dim);
    }
    if (rs.type == "llama3") {
        // Wavelengths longer than the original context / low_freq_factor are scaled by 1 / factor, shorter than
        // it / high_freq_factor kept, those between interpolated smoothly.
        at::Tensor inv = base_inv_freq(c.rope_theta, dim);
        const double old = static_cast<double>(rs.original_max_position_embeddings);
        const double lo = rs.low_freq_factor, hi = rs.high_freq_factor;
        at::Tensor wavelen = at::reciprocal(inv) * (2 * M_PI);
        at::Tensor scaled = at::where(wavelen > old / lo, inv / rs.factor, inv);
        at::Tensor smooth = (at::reciprocal(wavelen) * old - lo) / (hi - lo);
        at::Tensor smoothed = (1 - smooth) * scaled / rs.factor + smooth * scaled;
        at::Tensor medium = at::logical_not(wavelen < old / hi) & at::logical_not(wavelen > old / lo);
        return at::where(medium, smoothed, scaled);
    }
    return base_inv_freq(c.rope_theta, dim);
}

// [B, kv, S, D] -> [B, kv * n_rep, S, D], kv head j serving query heads j n_rep .. (j + 1) n_rep - 1 (repeat_kv).
at::Tensor repeat_kv(const at::Tensor &x, int64_t n_rep)
{
    if (n_rep == 1) return x;
    const int64_t B = x.size(0), kv = x.size(1), S = x.size(2), D = x.size(3);
    return x.unsqueeze(2).expand({B, kv, n_rep, S, D}).reshape({B, kv * n_rep, S, D});
}

// softmax(mask(q kᵀ · head_dim^-½)) (in float32) v: q [B, H, T, D], k and v [B, KV, S, D], `hidden` [T, S].
// Dropout on the probabilities from `split` (this tp rank's heads) when given, else the default generator.
at::Tensor attention_core(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v, const at::Tensor &hidden,
                          double dropout, bool train, const std::shared_ptr<parallel::tp::DropoutGenerator> &split)
{
    const int64_t n_rep = q.size(1) / k.size(1);
    at::Tensor scores = at::matmul(q, repeat_kv(k, n_rep).transpose(2, 3)) * std::pow(static_cast<double>(q.size(3)), -0.5);
    scores = scores.masked_fill(hidden, -std::numeric_limits<double>::infinity());
    at::Tensor att = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
    att = parallel::tp::region_dropout(att, dropout, train, split);
    return at::matmul(att, repeat_kv(v, n_rep));
}

struct Rotary {
    at::Tensor cos, sin;
};

// The positions a query does not see, [T, past + T] (true: hidden): query at absolute position past + i sees keys
// j <= past + i, and with a sliding window W only those with past + i - j < W.
at::Tensor hidden_keys(int64_t past, int64_t T, int64_t window, const at::TensorOptions &options)
{
    at::Tensor qpos = at::arange(past, past + T, options.dtype(at::kLong)).unsqueeze(1);
    at::Tensor kpos = at::arange(0, past + T, options.dtype(at::kLong)).unsqueeze(0);
    at::Tensor hidden = kpos > qpos;
    if (window > 0) hidden = hidden | ((qpos - kpos) >= window);
    return hidden;
}

// One decoder layer on h [B, T, C], `hidden` from hidden_keys(). With `kv` (generation) its keys and values of the
// earlier positions come in kv->first / second and leave extended by T. With `cp` (context parallelism) h is this
// rank's part of each sequence and attention runs over the whole sequence through the cp group (no `hidden`).
at::Tensor layer_forward(const LlamaLayer &l, const config::LlamaConfig &c, const at::Tensor &h, const Rotary &rope,
                         const at::Tensor &hidden, bool train, std::pair<at::Tensor, at::Tensor> *kv,
                         const parallel::cp::ContextParallel *cp = nullptr)
{
    const int64_t B = h.size(0), D = c.head_dim;
    const int64_t H = c.num_attention_heads / l.tp_size, KV = c.num_key_value_heads / l.tp_size; // this rank's heads
    at::Tensor x = rms_norm(h, sp_weight(l.input_norm, l.sequence_parallel), c.rms_norm_eps);
    at::Tensor q = l.q->forward(x);
    // Every position: under sequence parallelism the projections gathered them (h holds this rank's 1/tp), and the
    // rotary embedding and the mask are the whole sequence's.
    const int64_t T = q.size(1);
    q = q.view({B, T, H, D}).transpose(1, 2);
    at::Tensor k = l.k->forward(x).view({B, T, KV, D}).transpose(1, 2);
    at::Tensor v = l.v->forward(x).view({B, T, KV, D}).transpose(1, 2);
    q = apply_rope(q, rope.cos, rope.sin);
    k = apply_rope(k, rope.cos, rope.sin);
    if (kv != nullptr) {
        if (kv->first.defined()) {
            k = at::cat({kv->first, k}, 2);
            v = at::cat({kv->second, v}, 2);
        }
        kv->first = k;
        kv->second = v;
    }
    at::Tensor y;
    if (cp != nullptr) {
        parallel::cp::AttentionSpec spec;
        spec.scale = std::pow(static_cast<double>(D), -0.5);
        spec.window = l.window;
        spec.dropout = c.attention_dropout;
        spec.train = train;
        if (l.tp_dropout) spec.stream = l.tp_dropout->seed(); // this tp rank's heads: masks of their own (the ring)
        spec.float32_softmax = true;
        y = parallel::cp::attention(*cp, q, k, v, spec); // grouped: repeated there (Ulysses sends them unrepeated)
    } else if (l.recompute_attention && kv == nullptr && at::GradMode::is_enabled()) {
        // Selective recomputation: q, k and v kept, the [B, H, T, T] tensors made again in backward.
        const double p = c.attention_dropout;
        const bool random = train && p > 0.0;
        std::vector<ExtraGenerator> extra;
        if (random && l.tp_dropout) extra.push_back(parallel::tp::checkpoint_generator(l.tp_dropout));
        y = checkpoint_function({q, k, v}, {},
                                [hidden, p, train, split = l.tp_dropout](const std::vector<at::Tensor> &in) {
                                    return attention_core(in[0], in[1], in[2], hidden, p, train, split);
                                },
                                random, std::move(extra));
    } else {
        y = attention_core(q, k, v, hidden, c.attention_dropout, train, l.tp_dropout);
    }
    y = y.transpose(1, 2).reshape({B, T, H * D});
    at::Tensor a = h + l.o->forward(y);
    x = rms_norm(a, sp_weight(l.post_norm, l.sequence_parallel), c.rms_norm_eps);
    return a + l.down->forward(activation(c.hidden_act, l.gate->forward(x)) * l.up->forward(x));
}

at::Tensor normal(at::IntArrayRef sizes, double std) { return at::empty(sizes, at::kFloat).normal_(0.0, std); }

std::string layer_class(const config::LlamaConfig &c)
{
    if (c.model_type == "mistral") return "MistralDecoderLayer";
    if (c.model_type == "qwen2") return "Qwen2DecoderLayer";
    return "LlamaDecoderLayer";
}

} // namespace

LlamaModel::LlamaModel(const config::LlamaConfig &config, const ParameterFn &on_parameter) : config_(config)
{
    auto made = [&on_parameter](const at::Tensor &t) {
        if (on_parameter) on_parameter(t);
        return t;
    };
    const auto &c = config_;
    const int64_t C = c.hidden_size, H = c.num_attention_heads, KV = c.num_key_value_heads, D = c.head_dim;
    // transformers' LlamaPreTrainedModel._init_weights: Linear and Embedding weights ~ N(0, initializer_range),
    // biases 0, the padding row 0, RMSNorm weights 1; drawn in parameter order.
    const double std = c.initializer_range;
    auto linear = [&](int64_t out, int64_t in, bool bias) {
        at::Tensor w = made(normal({out, in}, std));
        at::Tensor b = bias ? made(at::zeros({out}, at::kFloat)) : at::Tensor();
        return make_linear(w, b, Linear::Layout::OutIn);
    };
    embed_ = normal({c.vocab_size, C}, std);
    if (c.pad_token_id) embed_[*c.pad_token_id].zero_();
    made(embed_);
    NamedTensors params = {{"model.embed_tokens.weight", embed_}};
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        auto l = std::make_shared<LlamaLayer>();
        l->index = i;
        l->window = c.window(i);
        l->recompute_attention = c.selective_recompute;
        l->q = linear(H * D, C, c.qkv_bias());
        l->k = linear(KV * D, C, c.qkv_bias());
        l->v = linear(KV * D, C, c.qkv_bias());
        l->o = linear(C, H * D, c.o_bias());
        l->gate = linear(c.intermediate_size, C, c.mlp_bias);
        l->up = linear(c.intermediate_size, C, c.mlp_bias);
        l->down = linear(C, c.intermediate_size, c.mlp_bias);
        l->input_norm = made(at::ones({C}, at::kFloat));
        l->post_norm = made(at::ones({C}, at::kFloat));
        for (auto &p : l->named("model.layers." + std::to_string(i) + ".")) params.push_back(std::move(p));
        layers_.push_back(std::move(l));
    }
    norm_w_ = made(at::ones({C}, at::kFloat));
    params.emplace_back("model.norm.weight", norm_w_);
    if (c.tie_word_embeddings) {
        lm_head_ = embed_;
    } else {
        lm_head_ = made(normal({c.vocab_size, C}, std));
        params.emplace_back("lm_head.weight", lm_head_);
    }
    for (auto &p : params) p.second.requires_grad_(true);
    lm_head_linear_ = make_linear(lm_head_, {}, Linear::Layout::OutIn);
    checkpointed_.assign(static_cast<size_t>(c.num_hidden_layers), c.activation_checkpointing);
    rope_seq_len_ = c.max_position_embeddings;
    block_end_ = layers_.size();
    set_tensors(std::move(params), {});
}

LlamaModel::~LlamaModel() = default;

at::Tensor LlamaModel::forward(const at::Tensor &input)
{
    if (pipelined()) return through_pipeline(input, nullptr, "forward");
    return run(input, nullptr);
}

at::Tensor LlamaModel::forward_cached(const at::Tensor &input, LlamaKvCache &cache)
{
    const auto step = [&] { return pipelined() ? through_pipeline(input, &cache, "generation") : run(input, &cache); };
    if (!cp_) return step();
    // As GptModel's: generation under context parallelism runs whole on every rank (every stage under pp x cp),
    // the cp group set aside.
    const auto cp = cp_;
    cp_ = nullptr;
    try {
        at::Tensor out = step();
        cp_ = cp;
        return out;
    } catch (...) {
        cp_ = cp;
        throw;
    }
}

std::pair<at::Tensor, at::Tensor> LlamaModel::rotary(int64_t past, int64_t T, const at::Device &device,
                                                     at::ScalarType dtype)
{
    int64_t seq_len = past + T;
    if (config_.rope_scaling.type == "dynamic") {
        // dynamic_rope_update: grow to the longest sequence seen; back to the original below max_position_embeddings.
        const int64_t m = config_.max_position_embeddings;
        if (seq_len > rope_seq_len_) rope_seq_len_ = seq_len;
        if (seq_len < m && rope_seq_len_ > m) rope_seq_len_ = m;
        seq_len = rope_seq_len_;
    }
    // Training repeats the same positions every step: the last cos/sin are kept (they need no gradient).
    RotaryCache &rc = rotary_cache_;
    if (rc.cos.defined() && rc.past == past && rc.T == T && rc.seq_len == seq_len && rc.cos.device() == device &&
        rc.cos.scalar_type() == dtype)
        return {rc.cos, rc.sin};
    at::Tensor inv = scaled_inv_freq(config_, seq_len);
    at::Tensor freqs = at::outer(at::arange(past, past + T, at::kLong).to(at::kFloat), inv);
    at::Tensor emb = at::cat({freqs, freqs}, -1);
    rc = {past, T, seq_len, emb.cos().to(device, dtype), emb.sin().to(device, dtype)};
    return {rc.cos, rc.sin};
}

at::Tensor LlamaModel::forward_stage(const at::Tensor &input, KvCache *cache)
{
    if (!pipelined()) fail(ACCEL_ERR_INTERNAL, "llama: forward_stage without a pipeline stage");
    if (!stage_first_ && (!input.defined() || input.dim() != 3 || input.size(2) != config_.hidden_size))
        fail(ACCEL_ERR_INTERNAL, "llama: a later pipeline stage takes hidden states [B, T, hidden_size]");
    return run(input, cache);
}

at::Tensor LlamaModel::run(const at::Tensor &input, LlamaKvCache *cache)
{
    const auto &c = config_;
    if (!input.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "input: missing");
    const bool ids_in = stage_first_; // a later pipeline stage receives hidden states [B, T, C]
    if (ids_in && input.scalar_type() != at::kLong && input.scalar_type() != at::kInt)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input: a llama model takes token ids (int64 or int32), got ") +
                                             c10::toString(input.scalar_type()));
    if (ids_in && input.dim() != 1 && input.dim() != 2)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: a llama model takes token ids [batch, seq] or [seq], got shape " +
                                             c10::str(input.sizes()));
    const bool unbatched = ids_in && input.dim() == 1;
    at::Tensor ids = unbatched ? input.unsqueeze(0) : input;
    const bool sequence_parallel = sequence_parallel_ && tp_group_;
    // The sequence's positions: a later pipeline stage under sequence parallelism receives its 1/tp of them.
    const int64_t T = !ids_in && sequence_parallel ? ids.size(1) * tp_group_->size() : ids.size(1);
    if (T < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "input: empty sequence");
    if (ids_in && ids.numel() > 0) {
        auto [lo, hi] = at::aminmax(ids);
        const int64_t l = lo.item<int64_t>(), h = hi.item<int64_t>();
        if (l < 0 || h >= c.vocab_size)
            fail(ACCEL_ERR_OUT_OF_RANGE, "input: token id " + std::to_string(l < 0 ? l : h) + " is outside [0, " +
                                             std::to_string(c.vocab_size) + ")");
    }
    if (cache != nullptr && cache->keys.size() != layers_.size()) {
        if (!cache->keys.empty()) fail(ACCEL_ERR_INTERNAL, "llama: KV cache of another model");
        cache->keys.resize(layers_.size());
        cache->values.resize(layers_.size());
    }
    const int64_t past = cache != nullptr ? cached_positions(*cache) : 0;
    if (cp_) parallel::cp::check_model_input(T, cache != nullptr, "llama");
    if (ids_in && sequence_parallel) parallel::tp::check_sequence_split(T, cache != nullptr, tp_group_->size(), "llama");
    const bool train = training_ && cache == nullptr;
    ForwardHooks *hooks = forward_hooks.get(); // a sharding engine's: gather a layer's parameters, free them after
    if (hooks) hooks->before_layer(0);
    at::Tensor h = ids_in ? embed(ids, sequence_parallel)
                          // The stage's own precision (the stages' boundary carries float32).
                          : input.to(layers_[block_begin_]->input_norm.scalar_type());
    auto cs = rotary(past, cp_ ? T * cp_->size() : T, h.device(), h.scalar_type());
    if (cp_) { // this rank's rows of the whole sequence's cos / sin
        const at::Tensor pos = parallel::cp::sequence_positions(T, cp_->rank(), cp_->size(), h.options()).to(h.device());
        cs = {cs.first.index_select(0, pos), cs.second.index_select(0, pos)};
    }
    const Rotary rope{cs.first, cs.second};
    const parallel::cp::ContextParallel *cp = cp_.get();
    std::map<int64_t, at::Tensor> masks; // by sliding window: made once per forward
    auto hidden_for = [&](int64_t window) -> const at::Tensor & {
        at::Tensor &m = masks[window];
        if (!m.defined() && !cp) m = hidden_keys(past, T, window, h.options());
        return m;
    };
    const bool checkpoint = cache == nullptr && at::GradMode::is_enabled();
    for (size_t i = block_begin_; i < block_end_; ++i) {
        if (hooks) hooks->before_layer(i + 1);
        if (checkpoint && checkpointed_[i]) {
            std::shared_ptr<const LlamaLayer> layer = layers_[i];
            const config::LlamaConfig cfg = c;
            // The rerun draws its split regions' masks again (its heads', a rowwise LoRA adapter's): the tp generator
            // goes back with the default one (as the gpt's).
            std::vector<ExtraGenerator> extra;
            if (train && tp_dropout_) extra.push_back(parallel::tp::checkpoint_generator(tp_dropout_));
            h = checkpoint_layer(h, layer->checkpoint_params(),
                                 [layer, cfg, rope, train, hidden = hidden_for(layer->window), cp](const at::Tensor &x) {
                                     return layer_forward(*layer, cfg, x, rope, hidden, train, nullptr, cp);
                                 },
                                 train && (c.attention_dropout > 0.0 || layer->random_linears()), std::move(extra));
        } else if (cache != nullptr) {
            std::pair<at::Tensor, at::Tensor> kv{cache->keys[i], cache->values[i]};
            h = layer_forward(*layers_[i], c, h, rope, hidden_for(layers_[i]->window), false, &kv);
            cache->keys[i] = kv.first;
            cache->values[i] = kv.second;
        } else {
            h = layer_forward(*layers_[i], c, h, rope, hidden_for(layers_[i]->window), train, nullptr, cp);
        }
        if (hooks) h = hooks->after_layer(i + 1, h);
    }
    if (!stage_last_) return h;
    h = rms_norm(h, sp_weight(norm_w_, sequence_parallel ? tp_group_ : nullptr), c.rms_norm_eps);
    at::Tensor logits = lm_head_linear_->forward(h);
    if (hooks) logits = hooks->after_layer(0, logits);
    if (unbatched) logits = logits.squeeze(0);
    mark_logits(logits);
    return logits;
}

// The first stage's input: the token embeddings (vocabulary-parallel under tp), scattered along the sequence under
// sequence parallelism (from here to the head each rank holds its 1/tp of the positions).
at::Tensor LlamaModel::embed(const at::Tensor &ids, bool sequence_parallel) const
{
    const int64_t pad = config_.pad_token_id ? *config_.pad_token_id : -1;
    at::Tensor h = tp_group_ ? parallel::tp::vocab_parallel_embedding(ids, embed_, vocab_start_, tp_group_, pad)
                             : at::embedding(embed_, ids, pad);
    return sequence_parallel ? parallel::tp::scatter_sequence(h, tp_group_, 1) : h;
}

void LlamaModel::mark_logits(const at::Tensor &logits) const
{
    if (tp_group_) parallel::tp::mark_vocab_parallel(logits, {tp_group_, vocab_start_, config_.vocab_size});
    if (cp_) parallel::cp::mark_context_parallel(logits, cp_->group);
}

void LlamaModel::apply_pipeline_stage(const std::vector<std::pair<int64_t, int64_t>> &chunks, bool first, bool last)
{
    // A layer's LoRA adapters (checkpoint_params) stay with it.
    cut_stage(*this, "llama", chunks, first, last, layers_.size(), [this](size_t i) { return layers_[i]->checkpoint_params(); },
              {embed_}, {norm_w_, lm_head_});
}

parallel::pp::PipelineStageModel::Shape LlamaModel::pipeline_shape() const
{
    return {"llama", config_.hidden_size, config_.vocab_size, 0, "max_position_embeddings"}; // rotary: no limit
}

std::vector<int64_t> LlamaModel::block_costs() const { return costs_by_name(*this, "model.layers.", layers_.size()); }

// The llama's plan as tp_plan.hpp lists it (transformers' base_model_tp_plan): per layer two regions (attention
// 2i, MLP 2i + 1), the rest fixed.
std::vector<parallel::tp::PlanModule> LlamaModel::plan_modules() const
{
    using config::TpStyle;
    std::vector<parallel::tp::PlanModule> m;
    m.push_back({"model.embed_tokens", TpStyle::Rowwise, {}}); // vocabulary-parallel
    for (const auto &l : layers_) {
        const std::string p = "model.layers." + std::to_string(l->index) + ".";
        const int attn = static_cast<int>(2 * l->index), mlp = attn + 1;
        m.push_back({p + "input_layernorm", TpStyle::Replicate, {}});
        for (const char *x : {"q_proj", "k_proj", "v_proj"})
            m.push_back({p + "self_attn." + x, TpStyle::Colwise, {}, attn});
        m.push_back({p + "self_attn.o_proj", TpStyle::Rowwise, {}, attn, true});
        m.push_back({p + "post_attention_layernorm", TpStyle::Replicate, {}});
        m.push_back({p + "mlp.gate_proj", TpStyle::Colwise, {}, mlp});
        m.push_back({p + "mlp.up_proj", TpStyle::Colwise, {}, mlp});
        m.push_back({p + "mlp.down_proj", TpStyle::Rowwise, {}, mlp, true});
    }
    m.push_back({"model.norm", TpStyle::Replicate, {}});
    // transformers' colwise_rep head gathers the logits; accel keeps them split for the vocabulary-parallel loss.
    m.push_back({"lm_head", TpStyle::ColwiseRep, {TpStyle::Colwise}});
    return m;
}

void LlamaModel::apply_tensor_parallel(const std::shared_ptr<distributed::Communicator> &group)
{
    namespace tp = parallel::tp;
    if (!group) fail(ACCEL_ERR_INTERNAL, "llama: tensor parallelism without a group");
    if (tp_group_) fail(ACCEL_ERR_FAILED_PRECONDITION, "llama: tensor parallelism is already applied");
    // pp x tp slices the whole model first: a stage's emptied parameters have nothing left to slice.
    if (pipelined()) fail(ACCEL_ERR_INTERNAL, "llama: tensor parallelism after the pipeline cut");
    const auto &c = config_;
    const int64_t n = group->size(), r = group->rank();
    const tp::ResolvedPlan resolved =
        tp::resolve_plan(plan_modules(), static_cast<int>(2 * layers_.size()), tp_plan(), "model.");
    bool any_attention = false, any_mlp = false;
    for (const auto &l : layers_) {
        any_attention = any_attention || resolved.region_split[2 * l->index];
        any_mlp = any_mlp || resolved.region_split[2 * l->index + 1];
    }
    if (any_attention) {
        tp::require_divides("num_attention_heads", c.num_attention_heads, n);
        tp::require_divides("num_key_value_heads", c.num_key_value_heads, n);
    }
    if (any_mlp) tp::require_divides("intermediate_size", c.intermediate_size, n);
    tp::refuse_unbuilt_sequence_parallel(sequence_parallel_, cp_ != nullptr, resolved.overridden);
    // Sequence parallelism: the activations between the layers are [B, T / tp, C], split along dimension 1.
    tp::LinearPlanOptions layer;
    if (sequence_parallel_) layer.column.sequence_dim = layer.row.sequence_dim = 1;
    for (const auto &l : layers_) {
        const std::string p = "model.layers." + std::to_string(l->index) + ".";
        if (resolved.region_split[2 * l->index])
            for (const auto &[linear, name] : {std::pair{l->q, "self_attn.q_proj"}, {l->k, "self_attn.k_proj"},
                                               {l->v, "self_attn.v_proj"}, {l->o, "self_attn.o_proj"}})
                tp::check_parallelizable(*linear, p + name, layer);
        if (resolved.region_split[2 * l->index + 1])
            for (const auto &[linear, name] :
                 {std::pair{l->gate, "mlp.gate_proj"}, {l->up, "mlp.up_proj"}, {l->down, "mlp.down_proj"}})
                tp::check_parallelizable(*linear, p + name, layer);
    }
    if (n == 1) return;
    std::map<std::string, tp::ParameterSlicing> plan;
    using tp::LinearStyle;
    // Attention dropout on a rank's heads draws from its generator (rng_tracker.hpp), seeded from set_seed's.
    auto tp_dropout = tp::make_dropout_generator(r);
    layer.dropout = tp_dropout; // LoRA's dropout on a rowwise projection's split input
    for (auto &l : layers_) {
        const std::string p = "model.layers." + std::to_string(l->index) + ".";
        if (resolved.region_split[2 * l->index]) {
            tp::parallelize_linear(l->q, p + "self_attn.q_proj", LinearStyle::Colwise, group, plan, layer);
            tp::parallelize_linear(l->k, p + "self_attn.k_proj", LinearStyle::Colwise, group, plan, layer);
            tp::parallelize_linear(l->v, p + "self_attn.v_proj", LinearStyle::Colwise, group, plan, layer);
            tp::parallelize_linear(l->o, p + "self_attn.o_proj", LinearStyle::Rowwise, group, plan, layer);
            l->tp_size = n;
            l->tp_dropout = tp_dropout;
        }
        if (sequence_parallel_) l->sequence_parallel = group;
        if (resolved.region_split[2 * l->index + 1]) {
            tp::parallelize_linear(l->gate, p + "mlp.gate_proj", LinearStyle::Colwise, group, plan, layer);
            tp::parallelize_linear(l->up, p + "mlp.up_proj", LinearStyle::Colwise, group, plan, layer);
            tp::parallelize_linear(l->down, p + "mlp.down_proj", LinearStyle::Rowwise, group, plan, layer);
        }
    }
    // The vocabulary: the embedding's rows (and the untied head's) split as the gpt plan splits them; a tied
    // head is the same tensor, narrowed once.
    at::NoGradGuard no_grad;
    auto narrow_rows = [&](const std::string &name, const at::Tensor &t) {
        tp::ParameterSlicing s{0, 1, t.size(0)};
        at::Tensor mutable_t = t;
        mutable_t.set_data(tp::slice_parameter(t, s, r, n));
        plan[name] = s;
    };
    narrow_rows("model.embed_tokens.weight", embed_);
    if (!c.tie_word_embeddings) narrow_rows("lm_head.weight", lm_head_);
    lm_head_linear_ = tp::make_column_parallel_linear(make_linear(lm_head_, {}, Linear::Layout::OutIn), group, layer.column);
    vocab_start_ = r * (tp::padded_vocab_size(c.vocab_size, n) / n);
    tp_group_ = group;
    tp_dropout_ = std::move(tp_dropout);
    tp_slicing_ = std::move(plan);
}

void LlamaModel::apply_context_parallel(std::shared_ptr<const parallel::cp::ContextParallel> cp)
{
    if (!cp || !cp->group) fail(ACCEL_ERR_INTERNAL, "llama: context parallelism without a group");
    if (cp_) fail(ACCEL_ERR_FAILED_PRECONDITION, "llama: context parallelism is already applied");
    if (cp->size() > 1 && config_.selective_recompute)
        fail(ACCEL_ERR_UNIMPLEMENTED, "llama: recompute_granularity \"selective\" under context parallelism (cp_size > 1) "
                                      "is not built yet; use activation_checkpointing (\"full\")");
    if (cp->size() > 1) cp_ = std::move(cp);
}

std::vector<ModuleUnit> LlamaModel::units() const
{
    std::vector<ModuleUnit> out;
    out.push_back({"model.embed_tokens", "embedding", {"model.embed_tokens.weight"}});
    const std::string type = layer_class(config_);
    for (const auto &l : layers_) {
        ModuleUnit u{"model.layers." + std::to_string(l->index), type, {}};
        for (const auto &p : l->named(u.name + ".")) u.parameter_names.push_back(p.first);
        out.push_back(std::move(u));
    }
    out.push_back({"model.norm", "rms_norm", {"model.norm.weight"}});
    // Tied: the head's weight belongs to model.embed_tokens (listed there).
    out.push_back({"lm_head", "linear", config_.tie_word_embeddings ? std::vector<std::string>{}
                                                                     : std::vector<std::string>{"lm_head.weight"}});
    return with_inserted_parameters(std::move(out));
}

std::vector<std::string> LlamaModel::layer_types() const
{
    std::vector<std::string> out{"llama_embeddings_and_head"};
    out.insert(out.end(), layers_.size(), layer_class(config_));
    return out;
}

std::vector<size_t> LlamaModel::parameter_layers() const
{
    static const std::string prefix = "model.layers.";
    std::vector<size_t> out;
    for (const auto &p : named_parameters()) {
        size_t layer = 0;
        if (p.first.compare(0, prefix.size(), prefix) == 0)
            layer = 1 + static_cast<size_t>(std::stoul(p.first.substr(prefix.size())));
        out.push_back(layer);
    }
    return out;
}

void LlamaModel::set_activation_checkpointing(const std::vector<bool> &layers)
{
    for (size_t i = 0; i < checkpointed_.size(); ++i) checkpointed_[i] = i + 1 < layers.size() && layers[i + 1];
}

bool LlamaModel::activation_checkpointing() const
{
    return std::find(checkpointed_.begin(), checkpointed_.end(), true) != checkpointed_.end();
}

std::vector<LinearSlot> LlamaModel::linear_slots()
{
    std::vector<LinearSlot> out;
    for (auto &l : layers_) {
        const std::string p = "model.layers." + std::to_string(l->index) + ".";
        const size_t layer = static_cast<size_t>(l->index) + 1;
        out.push_back({p + "self_attn.q_proj", &l->q, layer});
        out.push_back({p + "self_attn.k_proj", &l->k, layer});
        out.push_back({p + "self_attn.v_proj", &l->v, layer});
        out.push_back({p + "self_attn.o_proj", &l->o, layer});
        out.push_back({p + "mlp.gate_proj", &l->gate, layer});
        out.push_back({p + "mlp.up_proj", &l->up, layer});
        out.push_back({p + "mlp.down_proj", &l->down, layer});
    }
    return out;
}

std::string LlamaModel::canonical_key(const std::string &key) const
{
    if (config_.tie_word_embeddings && key == "lm_head.weight") return "model.embed_tokens.weight";
    // transformers before 4.31 saved each layer's rotary buffer (self_attn.rotary_emb.inv_freq): recomputed here,
    // as transformers ignores it on load.
    static const std::string inv_freq = ".rotary_emb.inv_freq";
    if (key.size() > inv_freq.size() && key.compare(key.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0)
        return "";
    // A LlamaModel checkpoint (the base model without the head): the same names without "model.".
    static const std::string prefix = "model.";
    if (key.compare(0, prefix.size(), prefix) != 0 && key.compare(0, 8, "lm_head.") != 0) return prefix + key;
    return key;
}

void LlamaModel::set_selective_recompute(bool on)
{
    config_.selective_recompute = on;
    for (const auto &l : layers_) l->recompute_attention = on;
}

} // namespace accel
