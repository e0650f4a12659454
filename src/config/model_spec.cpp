#include "config/model_spec.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

namespace accel::config {

namespace {

constexpr int64_t kMaxDim = int64_t(1) << 31;

// Byte counts of fp32 parameters, checked: each dimension is at most 2^31, so products of two or more can
// overflow 64 bits, and LibTorch would then fail with "Storage size calculation overflowed" (an internal
// error) or try to allocate a nonsense size. A count above INT64_MAX bytes is an argument error naming the keys.
class ByteCount {
public:
    explicit ByteCount(std::string keys) : keys_(std::move(keys)) {}
    // Adds the product of `dims` elements of 4 bytes.
    ByteCount &add(std::initializer_list<int64_t> dims)
    {
        uint64_t n = sizeof(float);
        for (int64_t d : dims)
            if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) overflow();
        if (__builtin_add_overflow(bytes_, n, &bytes_) || bytes_ > static_cast<uint64_t>(INT64_MAX)) overflow();
        return *this;
    }
    ByteCount &add_product(const std::vector<int64_t> &dims, int64_t times)
    {
        uint64_t n = static_cast<uint64_t>(times);
        for (int64_t d : dims)
            if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) overflow();
        if (n > static_cast<uint64_t>(INT64_MAX)) overflow();
        return add({static_cast<int64_t>(n)});
    }
    void store(LayerSpec &l) const
    {
        l.bytes = bytes_;
        l.size_keys = keys_;
    }

private:
    [[noreturn]] void overflow() const
    {
        fail(ACCEL_ERR_INVALID_ARGUMENT, keys_ + ": these sizes need more than " + std::to_string(INT64_MAX) +
                                             " bytes of parameters (the byte count overflows)");
    }
    std::string keys_;
    uint64_t bytes_ = 0;
};

void count_bytes(LayerSpec &l, const JsonObject &o)
{
    auto keys = [&](std::initializer_list<const char *> names) {
        std::string s;
        for (const char *n : names) s += (s.empty() ? "" : ", ") + o.path_of(n);
        return s;
    };
    if (l.type == "linear") {
        ByteCount c(keys({"in_features", "out_features"}));
        c.add({l.in_features, l.out_features}).add({l.bias ? l.out_features : 0}).store(l);
    } else if (l.type == "conv2d") {
        ByteCount c(keys({"in_channels", "out_channels", "kernel_size"}));
        c.add({l.out_channels, l.in_channels, l.kernel_size, l.kernel_size}).add({l.bias ? l.out_channels : 0}).store(l);
    } else if (l.type == "layer_norm") {
        ByteCount c(keys({"normalized_shape"}));
        c.add_product(l.normalized_shape, l.elementwise_affine ? 2 : 0).store(l);
    } else if (l.type == "batch_norm") {
        ByteCount c(keys({"num_features"}));
        c.add({l.num_features, 4}).store(l); // weight, bias, running mean and variance (at most)
    } else if (l.type == "embedding") {
        ByteCount c(keys({"num_embeddings", "embedding_dim"}));
        c.add({l.num_embeddings, l.embedding_dim}).store(l);
    } else if (l.type == "transformer_encoder_layer") {
        // in_proj (3 d x d), out_proj (d x d), linear1 (ff x d), linear2 (d x ff), their biases, two layer norms
        ByteCount c(keys({"d_model", "dim_feedforward"}));
        c.add({4, l.d_model, l.d_model}).add({2, l.d_model, l.dim_feedforward}).add({9, l.d_model}).add({l.dim_feedforward});
        c.store(l);
    }
}

LayerSpec parse_layer(JsonObject &o)
{
    LayerSpec l;
    l.type = o.get_enum("type", "", {"linear", "conv2d", "relu", "gelu", "tanh", "sigmoid", "dropout", "layer_norm",
                                     "batch_norm", "embedding", "flatten", "transformer_encoder_layer"});
    if (l.type.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("type") + ": required");
    auto required_int = [&](const char *key, int64_t min) {
        if (!o.has(key)) fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of(key) + ": required for a " + l.type + " layer");
        return o.get_int(key, 0, min, kMaxDim);
    };
    if (l.type == "linear") {
        l.in_features = required_int("in_features", 1);
        l.out_features = required_int("out_features", 1);
        l.bias = o.get_bool("bias", true);
        if (auto style = o.get_optional_string("tp_plan"))
            l.tp_plan = tp_style_name(parse_tp_style(*style, o.path_of("tp_plan")));
    } else if (l.type == "conv2d") {
        l.in_channels = required_int("in_channels", 1);
        l.out_channels = required_int("out_channels", 1);
        l.kernel_size = required_int("kernel_size", 1);
        l.stride = o.get_int("stride", 1, 1, 1 << 16);
        l.padding = o.get_int("padding", 0, 0, 1 << 16);
        l.bias = o.get_bool("bias", true);
    } else if (l.type == "dropout") {
        l.p = o.get_double("p", 0.5, 0.0, 1.0);
    } else if (l.type == "layer_norm") {
        if (!o.has("normalized_shape"))
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("normalized_shape") + ": required for a layer_norm layer");
        l.normalized_shape = o.get_int_array("normalized_shape", 1, kMaxDim);
        if (l.normalized_shape.empty())
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("normalized_shape") + ": expected a non-empty array");
        l.eps = o.get_double("eps", 1e-5, 0.0, 1.0, true);
        l.elementwise_affine = o.get_bool("elementwise_affine", true);
    } else if (l.type == "batch_norm") {
        l.num_features = required_int("num_features", 1);
        l.dims = o.get_int("dims", 1, 1, 2);
        l.eps = o.get_double("eps", 1e-5, 0.0, 1.0, true);
        l.momentum = o.get_double("momentum", 0.1, 0.0, 1.0);
        l.affine = o.get_bool("affine", true);
        l.track_running_stats = o.get_bool("track_running_stats", true);
    } else if (l.type == "embedding") {
        l.num_embeddings = required_int("num_embeddings", 1);
        l.embedding_dim = required_int("embedding_dim", 1);
    } else if (l.type == "flatten") {
        l.start_dim = o.get_int("start_dim", 1, -64, 64);
        l.end_dim = o.get_int("end_dim", -1, -64, 64);
    } else if (l.type == "transformer_encoder_layer") {
        l.d_model = required_int("d_model", 1);
        l.nhead = required_int("nhead", 1);
        if (l.d_model % l.nhead != 0)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("nhead") + ": must divide d_model (" + std::to_string(l.d_model) +
                                                 "), got " + std::to_string(l.nhead));
        l.dim_feedforward = o.get_int("dim_feedforward", 2048, 1, kMaxDim);
        l.dropout = o.get_double("dropout", 0.1, 0.0, 1.0);
        l.activation = o.get_enum("activation", "relu", {"relu", "gelu"});
        l.batch_first = o.get_bool("batch_first", false);
        l.tp_plan = o.get_enum("tp_plan", "", {"auto", "replicate"});
    }
    o.finish();
    count_bytes(l, o);
    return l;
}

// "frozen": a glob or an array of globs, non-empty (whether each matches a parameter is checked on the built model).
std::vector<std::string> parse_frozen(JsonObject &root)
{
    std::vector<std::string> out = root.get_string_or_array("frozen", {});
    for (size_t i = 0; i < out.size(); ++i)
        if (out[i].empty())
            fail(ACCEL_ERR_INVALID_ARGUMENT, root.path_of("frozen") + "[" + std::to_string(i) +
                                                 "]: expected a parameter name or glob, got \"\"");
    return out;
}

LayerSpec activation_layer(const std::string &name)
{
    LayerSpec l;
    l.type = name;
    return l;
}

} // namespace

ModelSpec parse_model_spec(const char *json)
{
    JsonDocument doc(json, "spec_json");
    JsonObject root(doc.root(), "");
    ModelSpec spec;
    if (auto lora = root.get_object("lora")) spec.lora = parse_lora_config(*lora);
    std::string type = root.get_enum("type", "", {"mlp", "sequential", "gpt", "llama"});
    if (type.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "type: required (\"mlp\", \"sequential\", \"gpt\" or \"llama\")");
    spec.frozen = parse_frozen(root);
    spec.empty_init = root.get_bool("empty_init", false);
    parse_tp_plan(root, "base_model_tp_plan", spec.tp_plan);
    parse_tp_plan(root, "tp_plan", spec.tp_plan);
    if (type == "gpt") {
        const GptConfig c = parse_gpt_config(root);
        // transformer.wte, .wpe; per block c_attn + attn.c_proj (4 C^2), c_fc + mlp.c_proj (2 C inner), biases
        // and layer norms (9 C + inner); ln_f; an untied lm_head.
        LayerSpec all;
        ByteCount b("vocab_size, n_positions, n_embd, n_layer, n_inner");
        b.add({c.vocab_size, c.n_embd}).add({c.n_positions, c.n_embd});
        b.add({c.n_layer, c.n_embd, 4 * c.n_embd}).add({c.n_layer, c.n_embd, 2 * c.inner()});
        b.add({c.n_layer, 9 * c.n_embd + c.inner()}).add({2 * c.n_embd});
        if (!c.tie_word_embeddings) b.add({c.vocab_size, c.n_embd});
        b.store(all);
        spec.bytes = all.bytes;
        spec.gpt = c;
        return spec;
    }
    if (type == "llama") {
        const LlamaConfig c = parse_llama_config(root);
        // embed_tokens; per layer q, k, v, o (with their biases), gate/up/down (with theirs), two norms; the final
        // norm; an untied lm_head.
        const int64_t C = c.hidden_size, I = c.intermediate_size, q = c.num_attention_heads * c.head_dim,
                      kv = c.num_key_value_heads * c.head_dim;
        LayerSpec all;
        ByteCount b("vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
                    "num_key_value_heads, head_dim");
        b.add({c.vocab_size, C}).add({c.num_hidden_layers, 2 * q + 2 * kv, C}).add({c.num_hidden_layers, 3 * C, I});
        b.add({c.num_hidden_layers, (c.qkv_bias() ? q + 2 * kv : 0) + (c.o_bias() ? C : 0) + 2 * C});
        b.add({c.num_hidden_layers, c.mlp_bias ? 2 * I + C : 0}).add({C});
        if (!c.tie_word_embeddings) b.add({c.vocab_size, C});
        b.store(all);
        spec.bytes = all.bytes;
        spec.llama = c;
        return spec;
    }
    if (type == "mlp") {
        if (!root.has("widths")) fail(ACCEL_ERR_INVALID_ARGUMENT, "widths: required for an mlp");
        auto widths = root.get_int_array("widths", 1, kMaxDim);
        if (widths.size() < 2)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "widths: expected at least 2 sizes (inputs and outputs), got " +
                                                 std::to_string(widths.size()));
        std::string act = root.get_enum("activation", "relu", {"relu", "gelu", "tanh", "sigmoid"});
        double dropout = root.get_double("dropout", 0.0, 0.0, 1.0);
        bool bias = root.get_bool("bias", true);
        for (size_t i = 0; i + 1 < widths.size(); ++i) {
            LayerSpec lin;
            lin.type = "linear";
            lin.in_features = widths[i];
            lin.out_features = widths[i + 1];
            lin.bias = bias;
            const std::string keys = "widths[" + std::to_string(i) + "], widths[" + std::to_string(i + 1) + "]";
            ByteCount(keys).add({lin.in_features, lin.out_features}).add({bias ? lin.out_features : 0}).store(lin);
            spec.layers.push_back(lin);
            if (i + 2 < widths.size()) { // no activation after the output layer
                spec.layers.push_back(activation_layer(act));
                if (dropout > 0.0) {
                    LayerSpec d = activation_layer("dropout");
                    d.p = dropout;
                    spec.layers.push_back(d);
                }
            }
        }
    } else {
        if (!root.has("layers")) fail(ACCEL_ERR_INVALID_ARGUMENT, "layers: required for a sequential model");
        for (auto &o : root.get_object_array("layers")) spec.layers.push_back(parse_layer(o));
        if (spec.layers.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "layers: expected at least one layer");
    }
    root.finish();
    for (const LayerSpec &l : spec.layers)
        if (__builtin_add_overflow(spec.bytes, l.bytes, &spec.bytes) || spec.bytes > static_cast<uint64_t>(INT64_MAX))
            fail(ACCEL_ERR_INVALID_ARGUMENT, l.size_keys + ": the model's parameters need more than " +
                                                 std::to_string(INT64_MAX) + " bytes (the byte count overflows)");
    return spec;
}

} // namespace accel::config
