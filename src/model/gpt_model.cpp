// GPT-2 as Hugging Face's modeling_gpt2.py computes it (eager attention):
//   h_0 = dropout(wte[ids] + wpe[pos])
//   per block: a = h + dropout(c_proj(attn(ln_1(h)))),  h' = a + dropout(mlp.c_proj(act(mlp.c_fc(ln_2(a)))))
//   attn: q, k, v = split(c_attn(x)); softmax(mask(q k^T / sqrt(head_dim))) v, heads merged
//   logits = ln_f(h_L) lm_head^T, lm_head = wte when tied
// Conv1D layers are y = addmm(bias, x, weight) with weight [in, out], exactly as HF's Conv1D.
#include "model/gpt_model.hpp"

#include "common/error.hpp"
#include "model/activation_checkpoint.hpp"

#include <torch/csrc/autograd/generated/variable_factories.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace accel {

struct GptBlock {
    int64_t index = 0;
    // In HF's named_parameters() order within transformer.h.<index>.
    at::Tensor ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b, ln_2_w, ln_2_b, c_fc_w, c_fc_b,
        mlp_proj_w, mlp_proj_b;
    std::vector<at::Tensor> params() const
    {
        return {ln_1_w, ln_1_b, c_attn_w, c_attn_b, attn_proj_w, attn_proj_b,
                ln_2_w, ln_2_b, c_fc_w, c_fc_b, mlp_proj_w, mlp_proj_b};
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

// HF's Conv1D.
at::Tensor conv1d(const at::Tensor &x, const at::Tensor &w, const at::Tensor &b)
{
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = w.size(1);
    return at::addmm(b, x.reshape({-1, x.size(-1)}), w).view(out_sizes);
}

at::Tensor activation(const std::string &name, const at::Tensor &x)
{
    if (name == "gelu_new" || name == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
    if (name == "gelu") return at::gelu(x);
    if (name == "relu") return at::relu(x);
    return at::silu(x);
}

at::Tensor maybe_dropout(const at::Tensor &x, double p, bool train) { return train && p > 0.0 ? at::dropout(x, p, true) : x; }

// One block. With `kv` (generation), its keys and values are appended to kv->first/second.
at::Tensor block_forward(const GptBlock &b, const config::GptConfig &c, const at::Tensor &x, bool train,
                         std::pair<at::Tensor, at::Tensor> *kv)
{
    const int64_t B = x.size(0), T = x.size(1), C = c.n_embd, H = c.n_head, D = C / H;
    at::Tensor h = at::layer_norm(x, {C}, b.ln_1_w, b.ln_1_b, c.layer_norm_epsilon);
    at::Tensor qkv = conv1d(h, b.c_attn_w, b.c_attn_b);
    auto parts = qkv.split(C, -1);
    auto heads = [&](const at::Tensor &t) { return t.view({B, T, H, D}).transpose(1, 2); };
    at::Tensor q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
    int64_t past = 0;
    if (kv != nullptr) {
        if (kv->first.defined()) {
            past = kv->first.size(2);
            k = at::cat({kv->first, k}, 2);
            v = at::cat({kv->second, v}, 2);
        }
        kv->first = k;
        kv->second = v;
    }
    at::Tensor att = at::matmul(q, k.transpose(-1, -2));
    if (c.scale_attn_weights) att = att / std::sqrt(static_cast<double>(D));
    if (c.scale_attn_by_inverse_layer_idx) att = att / static_cast<double>(b.index + 1);
    // Query i (absolute position past + i) sees keys 0 .. past + i.
    at::Tensor mask = at::ones({T, past + T}, x.options().dtype(at::kBool)).triu(past + 1);
    att = att.masked_fill(mask, -std::numeric_limits<double>::infinity());
    att = at::softmax(att, -1).to(v.scalar_type());
    att = maybe_dropout(att, c.attn_pdrop, train);
    at::Tensor y = at::matmul(att, v).transpose(1, 2).reshape({B, T, C});
    y = maybe_dropout(conv1d(y, b.attn_proj_w, b.attn_proj_b), c.resid_pdrop, train);
    at::Tensor a = x + y;
    h = at::layer_norm(a, {C}, b.ln_2_w, b.ln_2_b, c.layer_norm_epsilon);
    h = conv1d(activation(c.activation_function, conv1d(h, b.c_fc_w, b.c_fc_b)), b.mlp_proj_w, b.mlp_proj_b);
    return a + maybe_dropout(h, c.resid_pdrop, train);
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
        b->ln_1_w = made(ones(C));
        b->ln_1_b = made(zeros(C));
        b->c_attn_w = made(normal({C, 3 * C}, std));
        b->c_attn_b = made(zeros(3 * C));
        b->attn_proj_w = made(normal({C, C}, proj_std));
        b->attn_proj_b = made(zeros(C));
        b->ln_2_w = made(ones(C));
        b->ln_2_b = made(zeros(C));
        b->c_fc_w = made(normal({C, c.inner()}, std));
        b->c_fc_b = made(zeros(c.inner()));
        b->mlp_proj_w = made(normal({c.inner(), C}, proj_std));
        b->mlp_proj_b = made(zeros(C));
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
    checkpointed_.assign(static_cast<size_t>(c.n_layer), c.activation_checkpointing);
    shared_config_ = std::make_shared<const config::GptConfig>(c);
    set_tensors(std::move(params), {});
}

GptModel::~GptModel() = default;

at::Tensor GptModel::forward(const at::Tensor &input) { return run(input, nullptr); }

at::Tensor GptModel::forward_cached(const at::Tensor &input, GptKvCache &cache) { return run(input, &cache); }

at::Tensor GptModel::run(const at::Tensor &input, GptKvCache *cache)
{
    const auto &c = config_;
    if (!input.defined()) fail(ACCEL_ERR_INVALID_ARGUMENT, "input: missing");
    if (input.scalar_type() != at::kLong && input.scalar_type() != at::kInt)
        fail(ACCEL_ERR_INVALID_ARGUMENT, std::string("input: a gpt model takes token ids (int64 or int32), got ") +
                                             c10::toString(input.scalar_type()));
    if (input.dim() != 1 && input.dim() != 2)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: a gpt model takes token ids [batch, seq] or [seq], got shape " +
                                             c10::str(input.sizes()));
    const bool unbatched = input.dim() == 1;
    at::Tensor ids = unbatched ? input.unsqueeze(0) : input;
    const int64_t T = ids.size(1);
    const int64_t past = cache != nullptr ? cache->length() : 0;
    if (T < 1) fail(ACCEL_ERR_INVALID_ARGUMENT, "input: empty sequence");
    if (past + T > c.n_positions)
        fail(ACCEL_ERR_INVALID_ARGUMENT, "input: " + std::to_string(past + T) + " positions" +
                                             (past > 0 ? " (" + std::to_string(past) + " cached)" : std::string()) +
                                             " exceed n_positions " + std::to_string(c.n_positions));
    if (ids.numel() > 0) {
        auto [lo, hi] = at::aminmax(ids);
        const int64_t l = lo.item<int64_t>(), h = hi.item<int64_t>();
        if (l < 0 || h >= c.vocab_size)
            fail(ACCEL_ERR_OUT_OF_RANGE, "input: token id " + std::to_string(l < 0 ? l : h) + " is outside [0, " +
                                             std::to_string(c.vocab_size) + ")");
    }
    if (cache != nullptr && cache->keys.size() != blocks_.size()) {
        if (!cache->keys.empty()) fail(ACCEL_ERR_INTERNAL, "gpt: KV cache of another model");
        cache->keys.resize(blocks_.size());
        cache->values.resize(blocks_.size());
    }
    const bool train = training_ && cache == nullptr;
    ForwardHooks *hooks = forward_hooks.get(); // a sharding engine's: gather a layer's parameters, free them after
    if (hooks) hooks->before_layer(0);
    at::Tensor pos = at::arange(past, past + T, ids.options().dtype(at::kLong));
    at::Tensor h = maybe_dropout(at::embedding(wte_, ids) + at::embedding(wpe_, pos), c.embd_pdrop, train);
    const bool checkpoint = cache == nullptr && at::GradMode::is_enabled();
    for (size_t i = 0; i < blocks_.size(); ++i) {
        if (hooks) hooks->before_layer(i + 1);
        if (checkpoint && checkpointed_[i]) {
            std::shared_ptr<const GptBlock> block = blocks_[i];
            std::shared_ptr<const config::GptConfig> config = shared_config_;
            h = checkpoint_layer(h, block->params(),
                                 [block, config, train](const at::Tensor &x) {
                                     return block_forward(*block, *config, x, train, nullptr);
                                 },
                                 train && (c.attn_pdrop > 0.0 || c.resid_pdrop > 0.0));
        } else if (cache != nullptr) {
            std::pair<at::Tensor, at::Tensor> kv{cache->keys[i], cache->values[i]};
            h = block_forward(*blocks_[i], c, h, false, &kv);
            cache->keys[i] = kv.first;
            cache->values[i] = kv.second;
        } else {
            h = block_forward(*blocks_[i], c, h, train, nullptr);
        }
        if (hooks) h = hooks->after_layer(i + 1, h);
    }
    h = at::layer_norm(h, {c.n_embd}, ln_f_w_, ln_f_b_, c.layer_norm_epsilon);
    at::Tensor logits = at::linear(h, lm_head_);
    if (hooks) logits = hooks->after_layer(0, logits);
    return unbatched ? logits.squeeze(0) : logits;
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

} // namespace accel
