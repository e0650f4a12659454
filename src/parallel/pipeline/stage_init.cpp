#include "parallel/pipeline/stage_init.hpp"

#include "big_modeling/empty_init.hpp"
#include "common/allocator.hpp"
#include "common/error.hpp"
#include "config/model_spec.hpp"
#include "parallel/pipeline/stages.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>

namespace accel::parallel::pp {

namespace {

struct Scope {
    int32_t stages, stage;
    config::ParallelismConfig config;
    bool keep_shapes;
};

// Per thread: thread ranks (the unit tests' communicator) each build their own stage in one process.
thread_local std::vector<std::weak_ptr<Scope>> scopes; // oldest first

// GptModel's constructor makes wte and wpe, then each block's 12 tensors (GPT2Block's order: ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj, weight then bias), then ln_f's two and lm_head when untied; finish()
// checks the names (wte is the tied head), so a change of that order fails loudly instead of cutting wrongly.
StageAtInit::Layout gpt_layout(const config::GptConfig &c)
{
    const int64_t C = c.n_embd, I = c.inner();
    const int64_t block = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (C * I + I) + (I * C + C);
    return {2, 12, c.tie_word_embeddings ? size_t{2} : size_t{3}, c.tie_word_embeddings,
            std::vector<int64_t>(static_cast<size_t>(c.n_layer), block)};
}

// LlamaModel's constructor makes embed_tokens, then each decoder layer's q, k, v, o, gate, up, down (weight, then bias
// where the config has one) and its two norms, then model.norm and lm_head when untied.
StageAtInit::Layout llama_layout(const config::LlamaConfig &c)
{
    const int64_t C = c.hidden_size, Q = c.num_attention_heads * c.head_dim, KV = c.num_key_value_heads * c.head_dim;
    const int64_t I = c.intermediate_size, qkv = c.qkv_bias() ? 1 : 0, o = c.o_bias() ? 1 : 0, mlp = c.mlp_bias ? 1 : 0;
    const int64_t layer = (Q + 2 * KV) * (C + qkv) + C * (Q + o) + 2 * I * (C + mlp) + C * (I + mlp) + 2 * C;
    const auto tensors = static_cast<size_t>(9 + 3 * qkv + o + 3 * mlp);
    return {1, tensors, c.tie_word_embeddings ? size_t{1} : size_t{2}, c.tie_word_embeddings,
            std::vector<int64_t>(static_cast<size_t>(c.num_hidden_layers), layer), "model.layers."};
}

} // namespace

std::shared_ptr<void> StageAtInit::scope(int32_t stages, int32_t stage, const config::ParallelismConfig &config,
                                         bool keep_shapes)
{
    auto s = std::make_shared<Scope>(Scope{stages, stage, config, keep_shapes});
    scopes.erase(std::remove_if(scopes.begin(), scopes.end(), [](const auto &w) { return w.expired(); }), scopes.end());
    scopes.push_back(s);
    return s;
}

std::shared_ptr<StageAtInit> StageAtInit::for_new_model(const config::ModelSpec &spec)
{
    std::shared_ptr<Scope> s;
    for (auto it = scopes.rbegin(); it != scopes.rend() && !s; ++it) s = it->lock();
    // LoRA's adapters would be made over emptied layers, and empty_init builds on meta already: both built whole.
    if (!s || (!spec.gpt && !spec.llama) || spec.lora || spec.empty_init) return nullptr;
    try {
        return std::make_shared<StageAtInit>(s->stages, s->stage, s->config,
                                             spec.gpt ? gpt_layout(*spec.gpt) : llama_layout(*spec.llama), s->keep_shapes);
    } catch (const Error &) {
        return nullptr; // a cut the config refuses: built whole, and prepare refuses it by name
    }
}

std::shared_ptr<StageAtInit> StageAtInit::of(const Model &model)
{
    return std::dynamic_pointer_cast<StageAtInit>(model.forward_hooks);
}

StageAtInit::StageAtInit(int32_t stages, int32_t stage, config::ParallelismConfig config, Layout layout, bool keep_shapes)
    : stages_(stages), stage_(stage), config_(std::move(config)), layout_(std::move(layout)),
      chunks_(stage_chunks(layout_.costs, config_, stages_, stage_)), keep_shapes_(keep_shapes)
{
}

bool StageAtInit::keeps(size_t index) const
{
    const size_t blocks_end = layout_.before + layout_.per_block * layout_.costs.size();
    if (index < layout_.before) return stage_ == 0 || (index == 0 && layout_.tied && stage_ == stages_ - 1);
    if (index >= blocks_end) return stage_ == stages_ - 1;
    const auto block = static_cast<int64_t>((index - layout_.before) / layout_.per_block);
    return std::any_of(chunks_.begin(), chunks_.end(), [block](const auto &c) { return block >= c.first && block < c.second; });
}

ParameterFn StageAtInit::hook()
{
    return [this](const at::Tensor &t) {
        // Drawn already (the generator has advanced as for the whole model): only the memory goes.
        if (!keeps(made_++)) {
            big_modeling::move_to_meta(t);
            elsewhere_.insert(t.unsafeGetTensorImpl());
            return_free_memory(); // as empty_init's hook: else glibc keeps the freed pages resident
        }
        order_.push_back(t.unsafeGetTensorImpl());
    };
}

void StageAtInit::finish(Model &model)
{
    const auto &named = model.named_parameters();
    const size_t expected = layout_.before + layout_.per_block * layout_.costs.size() + layout_.after;
    if (named.size() != expected || order_.size() != expected)
        fail(ACCEL_ERR_INTERNAL, "pipeline: the model has " + std::to_string(named.size()) + " parameters (" +
                                     std::to_string(order_.size()) + " made), the stage builder expected " +
                                     std::to_string(expected));
    for (size_t i = 0; i < named.size(); ++i) {
        const std::string &name = named[i].first;
        const bool in_blocks = i >= layout_.before && i < layout_.before + layout_.per_block * layout_.costs.size();
        const std::string &prefix = layout_.block_prefix;
        const std::string block = in_blocks ? prefix + std::to_string((i - layout_.before) / layout_.per_block) + "." : "";
        const bool matches = in_blocks ? name.compare(0, block.size(), block) == 0 : name.compare(0, prefix.size(), prefix) != 0;
        if (!matches || named[i].second.unsafeGetTensorImpl() != order_[i])
            fail(ACCEL_ERR_INTERNAL, "pipeline: parameter " + std::to_string(i) + " (\"" + name + "\") is not the one the "
                                     "stage builder took it for" + (in_blocks ? " (a parameter of " + block + ")" : ""));
    }
    if (!keep_shapes_) release_elsewhere(model);
    model.forward_hooks = shared_from_this();
}

void StageAtInit::release_elsewhere(Model &model) const
{
    at::Device device = at::kCPU;
    for (const auto &np : model.named_parameters())
        if (!np.second.is_meta()) {
            device = np.second.device();
            break;
        }
    // Zero elements, as prepare's cut leaves another stage's parameters (the pipeline fills them in for checkpoints:
    // pipeline_parallel.hpp's WholeStages).
    at::NoGradGuard no_grad;
    for (const auto &np : model.named_parameters())
        if (elsewhere(np.second) && np.second.is_meta()) {
            at::Tensor t = np.second;
            // Off meta first (set_data refuses to change the device type): an untouched allocation (none once the
            // cut has emptied it), freed by the set_data right after.
            big_modeling::materialize(t, device);
            t.set_data(at::empty({0}, t.options()));
        }
}

std::string StageAtInit::describe() const
{
    std::string blocks;
    for (const auto &c : chunks_)
        blocks += (blocks.empty() ? "[" : ", [") + std::to_string(c.first) + ", " + std::to_string(c.second) + ")";
    return "the model was built as pipeline stage " + std::to_string(stage_) + " of " + std::to_string(stages_) +
           " (parallelism_config.pp_size; blocks " + blocks + "): it holds only that stage's parameters until the "
           "accelerator it was built under prepares it";
}

void StageAtInit::check_same_cut(int32_t stages, int32_t stage, const config::ParallelismConfig &config, bool tp) const
{
    if (stages != stages_ || stage != stage_ || stage_chunks(layout_.costs, config, stages, stage) != chunks_ ||
        tp != keep_shapes_)
        fail(ACCEL_ERR_FAILED_PRECONDITION, "model: " + describe() + ", and this accelerator cuts it differently "
                                            "(pp_size, pp_split_points, the interleaving or tp_size); build the model "
                                            "while the accelerator that prepares it lives");
}

at::Tensor StageAtInit::before_forward(const at::Tensor &)
{
    check_access("forward");
    return {};
}

void StageAtInit::before_layer(size_t) { check_access("forward"); }

void StageAtInit::check_access(const char *what) const { fail(ACCEL_ERR_FAILED_PRECONDITION, std::string(what) + ": " + describe()); }

} // namespace accel::parallel::pp
