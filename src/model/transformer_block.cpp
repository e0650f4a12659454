#include "model/transformer_block.hpp"

#include "common/error.hpp"
#include "parallel/context_parallel/attention.hpp"

#include <limits>

namespace accel {

namespace {

at::Tensor maybe_dropout(const at::Tensor &x, double p, bool train) { return train && p > 0.0 ? at::dropout(x, p, true) : x; }

// softmax(mask(scale(q kᵀ))) v over heads: q [B, H, T, D], k and v [B, H, past + T, D].
at::Tensor attention(const TransformerBlockOptions &o, at::Tensor q, const at::Tensor &k, const at::Tensor &v,
                     int64_t past, bool train)
{
    if (o.context_parallel) {
        if (past > 0) fail(ACCEL_ERR_UNIMPLEMENTED, "a key/value cache under context parallelism is not built yet");
        parallel::cp::AttentionSpec spec;
        spec.scale = o.query_scale;
        for (double d : o.score_divisors) spec.scale /= d;
        spec.causal = o.causal;
        spec.dropout = o.attn_dropout;
        spec.train = train;
        return parallel::cp::attention(*o.context_parallel, q, k, v, spec);
    }
    if (o.query_scale != 1.0) q = q * o.query_scale;
    at::Tensor att = at::matmul(q, k.transpose(-1, -2));
    for (double d : o.score_divisors) att = att / d;
    if (o.causal) {
        // Query i (absolute position past + i) sees keys 0 .. past + i.
        const int64_t T = q.size(2);
        at::Tensor mask = at::ones({T, past + T}, q.options().dtype(at::kBool)).triu(past + 1);
        att = att.masked_fill(mask, -std::numeric_limits<double>::infinity());
    }
    att = at::softmax(att, -1).to(v.scalar_type());
    att = maybe_dropout(att, o.attn_dropout, train);
    return at::matmul(att, v);
}

at::Tensor layer_norm(const at::Tensor &x, const at::Tensor &w, const at::Tensor &b, double eps)
{
    return at::layer_norm(x, {x.size(-1)}, w, b, eps);
}

} // namespace

at::Tensor activation(const std::string &name, const at::Tensor &x)
{
    if (name == "gelu_new" || name == "gelu_pytorch_tanh") return at::gelu(x, "tanh");
    if (name == "gelu") return at::gelu(x);
    if (name == "relu") return at::relu(x);
    return at::silu(x);
}

at::Tensor TransformerBlock::forward(const at::Tensor &x, bool train, std::pair<at::Tensor, at::Tensor> *kv) const
{
    const auto &o = options;
    const int64_t B = x.size(o.seq_first ? 1 : 0), T = x.size(o.seq_first ? 0 : 1), D = x.size(2) / o.n_head;
    const int64_t H = o.n_head / o.tp_size, C = H * D; // this rank's heads and their features
    auto self_attention = [&](const at::Tensor &in) {
        auto parts = qkv->forward(in).split(C, -1);
        // -> [B, H, T, D] (head h holds features h D .. (h + 1) D), and back to the stream's layout.
        auto heads = [&](const at::Tensor &t) {
            return o.seq_first ? t.reshape({T, B, H, D}).permute({1, 2, 0, 3}) : t.reshape({B, T, H, D}).transpose(1, 2);
        };
        auto merge = [&](const at::Tensor &t) {
            return o.seq_first ? t.permute({2, 0, 1, 3}).reshape({T, B, C}) : t.transpose(1, 2).reshape({B, T, C});
        };
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
        at::Tensor y = merge(attention(o, q, k, v, past, train));
        return maybe_dropout(out_proj->forward(y), o.resid_dropout, train);
    };
    auto mlp = [&](const at::Tensor &in) {
        at::Tensor h = maybe_dropout(activation(o.activation, fc1->forward(in)), o.mlp_dropout, train);
        return maybe_dropout(fc2->forward(h), o.resid_dropout, train);
    };
    if (o.norm_first) {
        at::Tensor a = x + self_attention(layer_norm(x, norm1_weight, norm1_bias, o.layer_norm_eps));
        return a + mlp(layer_norm(a, norm2_weight, norm2_bias, o.layer_norm_eps));
    }
    at::Tensor a = layer_norm(x + self_attention(x), norm1_weight, norm1_bias, o.layer_norm_eps);
    return layer_norm(a + mlp(a), norm2_weight, norm2_bias, o.layer_norm_eps);
}

} // namespace accel
