#include "config/llama_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

namespace accel::config {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 31;

// transformers' defaults of the sizes that differ between the three config classes.
void family_defaults(LlamaConfig &c)
{
    if (c.model_type == "mistral") {
        c.intermediate_size = 14336;
        c.num_key_value_heads = 8;
        c.max_position_embeddings = 4096 * 32;
        c.sliding_window = 4096;
    } else if (c.model_type == "qwen2") {
        c.vocab_size = 151936;
        c.intermediate_size = 22016;
        c.max_position_embeddings = 32768;
        c.sliding_window = 4096;
    }
}

RopeScaling parse_rope_scaling(JsonObject &o)
{
    RopeScaling r;
    // "type" is the key older transformers wrote; newer ones write "rope_type" (and read both).
    const char *type_key = o.has("rope_type") ? "rope_type" : "type";
    if (!o.has(type_key)) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("rope_type") + ": required");
    const auto type = o.get_optional_string(type_key);
    r.type = *type;
    if (r.type != "default" && r.type != "linear" && r.type != "dynamic" && r.type != "llama3")
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of(type_key) + ": \"" + r.type + "\" is not supported (supported: "
                                                            "\"default\", \"linear\", \"dynamic\", \"llama3\")");
    if (o.has("rope_type")) o.accept("type"); // both written: rope_type wins, as in transformers
    if (r.type == "default") {
        o.finish();
        return r;
    }
    if (!o.has("factor")) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("factor") + ": required for \"" + r.type + "\"");
    r.factor = o.get_double("factor", 1.0, 0.0, 1e9, true);
    if (r.type == "llama3") {
        for (const char *k : {"low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
            if (!o.has(k)) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(k) + ": required for \"llama3\"");
        r.low_freq_factor = o.get_double("low_freq_factor", 1.0, 0.0, 1e9, true);
        r.high_freq_factor = o.get_double("high_freq_factor", 4.0, 0.0, 1e9, true);
        if (r.high_freq_factor <= r.low_freq_factor)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("high_freq_factor") + ": must be greater than low_freq_factor");
        r.original_max_position_embeddings = o.get_int("original_max_position_embeddings", 0, 1, kMaxDim);
    }
    o.finish();
    return r;
}

// transformers 5 writes the rotary settings as one object, "rope_parameters" ({"rope_type", "rope_theta" and the
// scaling's keys}); earlier versions wrote "rope_theta" and "rope_scaling" beside the other keys. Both forms are
// read; given both ways, they must agree.
void parse_rope(JsonObject &o, LlamaConfig &c)
{
    auto rp = o.get_object("rope_parameters");
    if (!rp) {
        c.rope_theta = o.get_double("rope_theta", c.rope_theta, 0.0, 1e30, true);
        if (auto rs = o.get_object("rope_scaling")) c.rope_scaling = parse_rope_scaling(*rs);
        return;
    }
    const double theta = rp->get_double("rope_theta", c.rope_theta, 0.0, 1e30, true);
    if (o.has("rope_theta") && o.get_double("rope_theta", theta, 0.0, 1e30, true) != theta)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("rope_theta") + ": differs from rope_parameters.rope_theta (" +
                                             std::to_string(theta) + ")");
    o.accept("rope_theta");
    c.rope_theta = theta;
    c.rope_scaling = parse_rope_scaling(*rp);
    if (auto rs = o.get_object("rope_scaling")) {
        const RopeScaling old = parse_rope_scaling(*rs);
        if (old.type != c.rope_scaling.type || old.factor != c.rope_scaling.factor)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("rope_scaling") + ": differs from rope_parameters (\"" +
                                                 c.rope_scaling.type + "\")");
    }
}

// transformers 5 lists each layer's attention in "layer_types" ("full_attention" / "sliding_attention"), derived
// from the sliding-window keys; a list that disagrees with them would be computed differently there, so it is
// refused rather than ignored.
void check_layer_types(JsonObject &o, const LlamaConfig &c)
{
    if (!o.has("layer_types")) {
        o.accept("layer_types");
        return;
    }
    const auto types = o.get_string_array("layer_types", {});
    if (int64_t(types.size()) != c.num_hidden_layers)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("layer_types") + ": " + std::to_string(types.size()) +
                                             " entries for " + std::to_string(c.num_hidden_layers) + " layers");
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
        const std::string want = c.window(i) ? "sliding_attention" : "full_attention";
        if (types[size_t(i)] != want)
            fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("layer_types") + "[" + std::to_string(i) + "]: \"" +
                                              types[size_t(i)] + "\" where the sliding-window keys give \"" + want +
                                              "\" (per-layer attention types beyond those keys are not supported)");
    }
}

// Keys of config.json that change nothing accel computes in training or generation.
void accept_inert_keys(JsonObject &o)
{
    for (const char *k : {"torch_dtype", "dtype", "architectures", "bos_token_id", "eos_token_id", "use_cache",
                          "transformers_version", "_name_or_path", "model_type", "initializer_range"})
        o.accept(k);
    // transformers' pretraining_tp > 1 computes the projections in slices (the same values, other rounding).
    const int64_t tp = o.get_int("pretraining_tp", 1, 1, kMaxDim);
    if (tp != 1)
        fail(ACCEL_ERR_UNIMPLEMENTED, o.path_of("pretraining_tp") + ": only 1 is supported, got " + std::to_string(tp));
}

// attention_bias / mlp_bias exist only in LlamaConfig: Mistral's and Qwen2's layers are built without them.
bool llama_only_flag(JsonObject &o, const LlamaConfig &c, const char *key)
{
    const bool v = o.get_bool(key, false);
    if (v && c.model_type != "llama")
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": model_type \"" + c.model_type + "\" has no " + key +
                                             " (only \"llama\")");
    return v;
}

} // namespace

int64_t LlamaConfig::window(int64_t layer) const
{
    if (!sliding_window) return 0;
    if (model_type == "mistral") return *sliding_window;
    if (model_type == "qwen2" && use_sliding_window && layer >= max_window_layers) return *sliding_window;
    return 0;
}

LlamaConfig parse_llama_config(JsonObject &o)
{
    LlamaConfig c;
    c.model_type = o.get_enum("model_type", "llama", {"llama", "mistral", "qwen2"});
    family_defaults(c);
    c.vocab_size = o.get_int("vocab_size", c.vocab_size, 1, kMaxDim);
    c.hidden_size = o.get_int("hidden_size", c.hidden_size, 1, kMaxDim);
    c.intermediate_size = o.get_int("intermediate_size", c.intermediate_size, 1, kMaxDim);
    c.num_hidden_layers = o.get_int("num_hidden_layers", c.num_hidden_layers, 0, 1 << 16);
    c.num_attention_heads = o.get_int("num_attention_heads", c.num_attention_heads, 1, kMaxDim);
    c.num_key_value_heads = o.get_int("num_key_value_heads", c.model_type == "mistral" ? c.num_key_value_heads
                                                                                        : c.num_attention_heads,
                                      1, kMaxDim);
    if (c.num_attention_heads % c.num_key_value_heads != 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("num_key_value_heads") + ": must divide num_attention_heads (" +
                                             std::to_string(c.num_attention_heads) + "), got " +
                                             std::to_string(c.num_key_value_heads));
    if (o.has("head_dim")) {
        c.head_dim = o.get_int("head_dim", 0, 1, kMaxDim);
    } else {
        o.accept("head_dim");
        if (c.hidden_size % c.num_attention_heads != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("num_attention_heads") + ": must divide hidden_size (" +
                                                 std::to_string(c.hidden_size) + ") when head_dim is not given, got " +
                                                 std::to_string(c.num_attention_heads));
        c.head_dim = c.hidden_size / c.num_attention_heads;
    }
    if (c.head_dim % 2 != 0) // rotary embeddings rotate the two halves of each head
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("head_dim") + ": must be even (rotary embeddings), got " +
                                             std::to_string(c.head_dim));
    c.hidden_act = o.get_enum("hidden_act", c.hidden_act, {"silu", "swish", "gelu", "gelu_new", "gelu_pytorch_tanh", "relu"});
    c.max_position_embeddings = o.get_int("max_position_embeddings", c.max_position_embeddings, 1, kMaxDim);
    c.initializer_range = o.get_double("initializer_range", c.initializer_range, 0.0, 1e3);
    c.rms_norm_eps = o.get_double("rms_norm_eps", c.rms_norm_eps, 0.0, 1.0);
    parse_rope(o, c);
    c.attention_bias = llama_only_flag(o, c, "attention_bias");
    c.mlp_bias = llama_only_flag(o, c, "mlp_bias");
    c.attention_dropout = o.get_double("attention_dropout", 0.0, 0.0, 1.0, false, true);
    c.tie_word_embeddings = o.get_bool("tie_word_embeddings", false);
    c.pad_token_id = o.get_optional_int("pad_token_id", 0, c.vocab_size - 1);
    if (c.model_type == "llama") {
        // LlamaConfig has no sliding window; a value here would be ignored by transformers, so it is refused.
        if (o.has("sliding_window"))
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("sliding_window") + ": model_type \"llama\" has no sliding "
                                                 "window (model_type \"mistral\" or \"qwen2\" have)");
        o.accept("sliding_window");
    } else {
        // null: no window (Mistral v0.2 and later); absent: the family's default (4096).
        const bool given = cJSON_GetObjectItemCaseSensitive(o.node(), "sliding_window") != nullptr;
        const auto w = o.get_optional_int("sliding_window", 1, INT64_MAX);
        if (given) c.sliding_window = w;
        if (c.model_type == "qwen2") {
            c.use_sliding_window = o.get_bool("use_sliding_window", false);
            c.max_window_layers = o.get_int("max_window_layers", c.max_window_layers, 0, 1 << 16);
        }
    }
    check_layer_types(o, c);
    const std::string granularity = o.get_enum("recompute_granularity", "", {"full", "selective"});
    c.activation_checkpointing = o.get_bool("activation_checkpointing", false) || granularity == "full";
    c.selective_recompute = granularity == "selective";
    accept_inert_keys(o);
    o.finish();
    return c;
}

std::string llama_config_to_hf_json(const LlamaConfig &c)
{
    static const char *arch[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM"};
    const int family = c.model_type == "mistral" ? 1 : c.model_type == "qwen2" ? 2 : 0;
    JsonWriter w;
    w.add("model_type", c.model_type);
    w.add("architectures", std::vector<std::string>{arch[family]});
    w.add("vocab_size", c.vocab_size);
    w.add("hidden_size", c.hidden_size);
    w.add("intermediate_size", c.intermediate_size);
    w.add("num_hidden_layers", c.num_hidden_layers);
    w.add("num_attention_heads", c.num_attention_heads);
    w.add("num_key_value_heads", c.num_key_value_heads);
    w.add("head_dim", c.head_dim);
    w.add("hidden_act", c.hidden_act);
    w.add("max_position_embeddings", c.max_position_embeddings);
    w.add("initializer_range", c.initializer_range);
    w.add("rms_norm_eps", c.rms_norm_eps);
    w.add("rope_theta", c.rope_theta);
    if (c.rope_scaling.type == "default") {
        w.add_null("rope_scaling");
    } else {
        w.begin_object("rope_scaling");
        w.add("rope_type", c.rope_scaling.type);
        w.add("factor", c.rope_scaling.factor);
        if (c.rope_scaling.type == "llama3") {
            w.add("low_freq_factor", c.rope_scaling.low_freq_factor);
            w.add("high_freq_factor", c.rope_scaling.high_freq_factor);
            w.add("original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings);
        }
        w.end_object();
    }
    if (family == 0) {
        w.add("attention_bias", c.attention_bias);
        w.add("mlp_bias", c.mlp_bias);
    } else {
        if (c.sliding_window) w.add("sliding_window", *c.sliding_window);
        else w.add_null("sliding_window");
    }
    if (family == 2) {
        w.add("use_sliding_window", c.use_sliding_window);
        w.add("max_window_layers", c.max_window_layers);
    }
    w.add("attention_dropout", c.attention_dropout);
    w.add("tie_word_embeddings", c.tie_word_embeddings);
    if (c.pad_token_id) w.add("pad_token_id", *c.pad_token_id);
    else w.add_null("pad_token_id");
    w.add("pretraining_tp", int64_t(1));
    w.add("torch_dtype", "float32");
    w.add("use_cache", true);
    return w.str();
}

} // namespace accel::config
