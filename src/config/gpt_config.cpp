#include "config/gpt_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

namespace accel::config {

namespace {
constexpr int64_t kMaxDim = int64_t(1) << 31;
}

GptConfig parse_gpt_config(JsonObject &o)
{
    GptConfig c;
    c.vocab_size = o.get_int("vocab_size", c.vocab_size, 1, kMaxDim);
    c.n_positions = o.get_int("n_positions", c.n_positions, 1, kMaxDim);
    c.n_embd = o.get_int("n_embd", c.n_embd, 1, kMaxDim);
    c.n_layer = o.get_int("n_layer", c.n_layer, 0, 1 << 16);
    c.n_head = o.get_int("n_head", c.n_head, 1, kMaxDim);
    if (c.n_embd % c.n_head != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("n_head") + ": must divide n_embd (" + std::to_string(c.n_embd) +
                                             "), got " + std::to_string(c.n_head));
    c.n_inner = o.get_int("n_inner", 0, 1, kMaxDim); // null or absent: 4 * n_embd, as HF
    c.activation_function =
        o.get_enum("activation_function", c.activation_function, {"gelu_new", "gelu_pytorch_tanh", "gelu", "relu", "silu"});
    c.resid_pdrop = o.get_double("resid_pdrop", c.resid_pdrop, 0.0, 1.0, false, true);
    c.embd_pdrop = o.get_double("embd_pdrop", c.embd_pdrop, 0.0, 1.0, false, true);
    c.attn_pdrop = o.get_double("attn_pdrop", c.attn_pdrop, 0.0, 1.0, false, true);
    c.layer_norm_epsilon = o.get_double("layer_norm_epsilon", c.layer_norm_epsilon, 0.0, 1.0, true);
    c.initializer_range = o.get_double("initializer_range", c.initializer_range, 0.0, 1e3);
    c.scale_attn_weights = o.get_bool("scale_attn_weights", true);
    c.scale_attn_by_inverse_layer_idx = o.get_bool("scale_attn_by_inverse_layer_idx", false);
    c.tie_word_embeddings = o.get_bool("tie_word_embeddings", true);
    const std::string granularity = o.get_enum("recompute_granularity", "", {"full", "selective"});
    c.activation_checkpointing = o.get_bool("activation_checkpointing", false) || granularity == "full";
    c.selective_recompute = granularity == "selective";
    o.finish();
    return c;
}

std::string gpt_config_to_hf_json(const GptConfig &c)
{
    JsonWriter w;
    w.add("model_type", "gpt2");
    w.add("architectures", std::vector<std::string>{"GPT2LMHeadModel"});
    w.add("vocab_size", c.vocab_size);
    w.add("n_positions", c.n_positions);
    w.add("n_embd", c.n_embd);
    w.add("n_layer", c.n_layer);
    w.add("n_head", c.n_head);
    if (c.n_inner > 0) w.add("n_inner", c.n_inner);
    else w.add_null("n_inner");
    w.add("activation_function", c.activation_function);
    w.add("resid_pdrop", c.resid_pdrop);
    w.add("embd_pdrop", c.embd_pdrop);
    w.add("attn_pdrop", c.attn_pdrop);
    w.add("layer_norm_epsilon", c.layer_norm_epsilon);
    w.add("initializer_range", c.initializer_range);
    w.add("scale_attn_weights", c.scale_attn_weights);
    w.add("scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx);
    w.add("reorder_and_upcast_attn", false);
    w.add("tie_word_embeddings", c.tie_word_embeddings);
    return w.str();
}

} // namespace accel::config
