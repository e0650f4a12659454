#include "model/transformer_block.hpp"

#include "common/error.hpp"
#include "model/activation_checkpoint.hpp"
#include "parallel/context_parallel/attention.hpp"
#include "parallel/tensor_parallel/mappings.hpp"
#include "parallel/tensor_parallel/rng_tracker.hpp"

#include <ATen/core/grad_mode.h>

#include <limits>

namespace accel {

namespace {

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
        if (o.tp_size > 1 && o.tp_dropout) spec.stream = o.tp_dropout->seed(); // this tp rank's heads (the ring)
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
    // This rank's heads (split); all of them (replicated by a tp_plan override) at tp_size 1.
    att = parallel::tp::region_dropout(att, o.attn_dropout, train, o.tp_size > 1 ? o.tp_dropout : nullptr);
    return at::matmul(att, v);
}

// attention() under selective recomputation: only q, k and v are kept for backward.
at::Tensor recomputed_attention(const TransformerBlockOptions &o, const at::Tensor &q, const at::Tensor &k,
                                const at::Tensor &v, bool train)
{
    const bool random = train && o.attn_dropout > 0.0;
    std::vector<ExtraGenerator> extra;
    if (random && o.tp_dropout) extra.push_back(parallel::tp::checkpoint_generator(o.tp_dropout));
    // The options by value: the rerun in backward must not depend on the block staying as it was.
    return checkpoint_function({q, k, v}, {},
                               [o, train](const std::vector<at::Tensor> &in) { return attention(o, in[0], in[1], in[2], 0, train); },
                               random, std::move(extra));
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
    const int64_t B = x.size(o.seq_first ? 1 : 0), D = x.size(2) / o.n_head;
    const int64_t H = o.n_head / o.tp_size, C = H * D; // this rank's heads and their features
    // The residual stream is replicated over tp (the default generator: the same mask on every rank) unless
    // sequence parallelism splits its positions.
    const std::shared_ptr<parallel::tp::DropoutGenerator> residual_generator = o.sequence_parallel ? o.tp_dropout : nullptr;
    auto self_attention = [&](const at::Tensor &in) {
        at::Tensor fused = qkv->forward(in);
        // Every position: under sequence parallelism qkv gathered the sequence (x holds 1/tp of it).
        const int64_t T = fused.size(o.seq_first ? 0 : 1);
        auto parts = fused.split(C, -1);
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
        at::Tensor y = merge(o.recompute_attention && kv == nullptr && !o.context_parallel && at::GradMode::is_enabled()
                                 ? recomputed_attention(o, q, k, v, train)
                                 : attention(o, q, k, v, past, train));
        return parallel::tp::region_dropout(out_proj->forward(y), o.resid_dropout, train, residual_generator);
    };
    auto mlp = [&](const at::Tensor &in) {
        // The hidden features are this rank's columns: split.
        at::Tensor h = parallel::tp::region_dropout(activation(o.activation, fc1->forward(in)), o.mlp_dropout, train,
                                                    o.mlp_replicated ? nullptr : o.tp_dropout);
        return parallel::tp::region_dropout(fc2->forward(h), o.resid_dropout, train, residual_generator);
    };
    // Under sequence parallelism each rank's norm sees its positions only: copy_to_region sums the parameters'
    // gradients over the group in backward (identity forward).
    auto norm = [&](const at::Tensor &in, const at::Tensor &w, const at::Tensor &b) {
        if (!o.sequence_parallel) return layer_norm(in, w, b, o.layer_norm_eps);
        return layer_norm(in, parallel::tp::copy_to_region(w, o.sequence_parallel),
                          parallel::tp::copy_to_region(b, o.sequence_parallel), o.layer_norm_eps);
    };
    if (o.norm_first) {
        at::Tensor a = x + self_attention(norm(x, norm1_weight, norm1_bias));
        return a + mlp(norm(a, norm2_weight, norm2_bias));
    }
    at::Tensor a = norm(x + self_attention(x), norm1_weight, norm1_bias);
    return norm(a + mlp(a), norm2_weight, norm2_bias);
}

} // namespace accel
