#include "parallel/context_parallel/attention.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "parallel/context_parallel/sequence_split.hpp"
#include "parallel/context_parallel/ulysses.hpp"
#include "parallel/tensor_parallel/group_capsule.hpp"
#include "parallel/tensor_parallel/mappings.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <limits>
#include <optional>

namespace accel::parallel::cp {

namespace {

using distributed::Communicator;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The ring's hops (NCCL ignores tags; each hop is one send and one recv): keys and values, and in the backward pass
// their gradients' running sums, which travel one step behind them.
constexpr int32_t kRingTag = 7301, kRingGradTag = 7302;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// `x` to rank + 1, the same shape from rank - 1. Even ranks send first, odd ranks receive first, so blocking
// sends (Gloo waits for the receiver) never all wait at once.
at::Tensor rotate(const at::Tensor &x, Communicator &g, int32_t tag)
{
    const int32_t n = g.size(), r = g.rank();
    at::Tensor out = x.contiguous(), in = at::empty_like(out);
    if (r % 2 == 0) {
        g.send(out, (r + 1) % n, tag);
        g.recv(in, (r + n - 1) % n, tag);
    } else {
        g.recv(in, (r + n - 1) % n, tag);
        g.send(out, (r + 1) % n, tag);
    }
    return in;
}

// A hop of the ring started before the step's blocks are computed, so that the transfer runs under them; arrived()
// gives rank - 1's tensor (gloo, MPI). Where a posted send waits for its receiver (NCCL, the communicator's default
// form) the hop happens in arrived() instead, as rotate() orders it.
class Hop {
public:
    Hop(const at::Tensor &x, Communicator &g, int32_t tag) : g_(g), out_(x.contiguous()), tag_(tag)
    {
        if (g.send_async_blocks()) return;
        const int32_t n = g.size(), r = g.rank();
        in_ = at::empty_like(out_);
        recv_ = g.recv_async(in_, (r + n - 1) % n, tag);
        send_ = g.send_async(out_, (r + 1) % n, tag);
    }
    at::Tensor arrived()
    {
        if (!recv_) return rotate(out_, g_, tag_);
        recv_->wait();
        send_->wait();
        return in_;
    }

private:
    Communicator &g_;
    at::Tensor out_, in_;
    int32_t tag_;
    std::shared_ptr<distributed::Work> recv_, send_;
};

// Which keys a query sees: key position j for query position i iff (not causal or j <= i) and (no window or
// i - j < window), as the models' own masks (llama_model.cpp's hidden_keys, transformers' Mistral) and
// masked_attention below.
struct Visibility {
    bool causal = true;
    int64_t window = 0; // 0: none
};

// How the queries of chunk `q` see the keys of chunk `k` (chunks of `c` positions, 2 x cp of them,
// sequence_split.hpp): none of them (the pair is skipped), all, or some (the block is masked).
enum class Pair { Skip, Masked, Full };
Pair pair_of(int64_t q, int64_t k, int64_t c, Visibility vis)
{
    // Over the pair, i - j runs from d - (c - 1) to d + (c - 1).
    const int64_t d = (q - k) * c, lo = d - (c - 1), hi = d + (c - 1);
    const bool window = vis.window > 0;
    if ((vis.causal && hi < 0) || (window && lo >= vis.window)) return Pair::Skip;
    const bool all_seen = (!vis.causal || lo >= 0) && (!window || hi < vis.window);
    return all_seen ? Pair::Full : Pair::Masked;
}

// The scores of chunk `cq`'s queries against chunk `ck`'s keys, the hidden ones -inf.
at::Tensor block_scores(const at::Tensor &q, const at::Tensor &k, double scale, int64_t cq, int64_t ck, Pair pair,
                        Visibility vis)
{
    at::Tensor s = at::matmul(q, k.transpose(-1, -2)) * scale;
    if (pair == Pair::Masked) {
        const int64_t c = s.size(-1);
        const at::Tensor pos = at::arange(c, s.options().dtype(at::kLong));
        const at::Tensor distance = (cq - ck) * c + pos.unsqueeze(1) - pos.unsqueeze(0); // i - j
        at::Tensor hidden = at::zeros({c, c}, s.options().dtype(at::kBool));
        if (vis.causal) hidden = hidden | (distance < 0);
        if (vis.window > 0) hidden = hidden | (distance >= vis.window);
        s = s.masked_fill(hidden, kNegInf);
    }
    return s;
}

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL; // 2^64 / golden ratio: spreads consecutive numbers apart

// Attention dropout under the ring: each chunk pair's mask (kept weights scaled by 1 / keep, as at::dropout) drawn
// from a generator seeded by the call's seed and the pair, so that backward draws the same mask again instead of
// keeping T x T of them.
struct RingDropout {
    double p = 0.0; // 0: none
    int64_t seed = 0; // the call's, with AttentionSpec::stream mixed in
    int64_t chunks = 0; // 2 x cp

    at::Tensor mask(const at::Tensor &like, int64_t cq, int64_t ck) const
    {
        const auto pair = static_cast<uint64_t>(cq * chunks + ck + 1);
        at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed) + kGolden * pair);
        const double keep = 1.0 - p;
        at::Tensor m = at::empty(like.sizes(), at::kFloat).bernoulli_(keep, gen).to(like.options());
        return m.mul_(keep > 0.0 ? 1.0 / keep : 0.0); // 1 / keep in like's dtype, as at::dropout scales
    }
};

// The call's dropout seed, from `g` or the default generator, with `stream` mixed in.
int64_t draw_seed(const std::optional<at::Generator> &g, uint64_t stream)
{
    const c10::optional<at::Generator> gen = g ? c10::optional<at::Generator>(*g) : c10::nullopt;
    const auto drawn = static_cast<uint64_t>(at::randint(std::numeric_limits<int64_t>::max(), {1}, gen, at::kLong).item<int64_t>());
    return static_cast<int64_t>(drawn ^ (stream * kGolden));
}

struct RingAttention : torch::autograd::Function<RingAttention> {
    static at::Tensor forward(AutogradContext *ctx, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                              const std::shared_ptr<Communicator> &group, double scale, bool causal, int64_t window,
                              double dropout, int64_t seed)
    {
        const Visibility vis{causal, window};
        const RingDropout drop{dropout, seed, 2 * static_cast<int64_t>(group->size())};
        Communicator &g = *group;
        const int32_t n = g.size(), r = g.rank();
        auto qh = q.chunk(2, 2);
        const int64_t c = qh[0].size(2);
        std::array<at::Tensor, 2> out, lse;
        for (size_t a = 0; a < 2; ++a) {
            out[a] = at::zeros_like(qh[a]);
            lse[a] = at::full(qh[a].sizes().slice(0, 3), kNegInf, q.options());
        }
        at::Tensor kv = at::stack({k, v});
        for (int32_t step = 0; step < n; ++step) {
            const int32_t j = (r - step + n) % n; // whose keys and values are here
            std::optional<Hop> next;
            if (step + 1 < n) next.emplace(kv, g, kRingTag);
            auto kh = kv[0].chunk(2, 2), vh = kv[1].chunk(2, 2);
            for (size_t a = 0; a < 2; ++a)
                for (size_t b : {a, 1 - a}) { // at step 0 (j = r) the diagonal pair (a, a) first
                    const int64_t cq = chunks_of(r, n)[a], ck = chunks_of(j, n)[b];
                    const Pair pair = pair_of(cq, ck, c, vis);
                    if (pair == Pair::Skip) continue;
                    at::Tensor s = block_scores(qh[a], kh[b], scale, cq, ck, pair, vis);
                    // Online softmax: rescale what was merged so far to the new log-sum-exp. Every row sees its own
                    // position in the diagonal pair, merged first, so lse is finite from then on, and a row that
                    // a later block hides entirely (a sliding window) adds exp(-inf) = 0.
                    at::Tensor merged = at::logaddexp(lse[a], at::logsumexp(s, -1));
                    at::Tensor w = at::exp(s - merged.unsqueeze(-1)); // dropout after the softmax: lse unchanged
                    if (drop.p > 0.0) w = w * drop.mask(w, cq, ck);
                    out[a] = out[a] * at::exp(lse[a] - merged).unsqueeze(-1) + at::matmul(w, vh[b]);
                    lse[a] = merged;
                }
            if (next) kv = next->arrived();
        }
        at::Tensor o = at::cat({out[0], out[1]}, 2), l = at::cat({lse[0], lse[1]}, 2);
        ctx->save_for_backward({q, k, v, o, l});
        ctx->saved_data["group"] = tp::group_capsule(group);
        ctx->saved_data["scale"] = scale;
        ctx->saved_data["causal"] = causal;
        ctx->saved_data["window"] = window;
        ctx->saved_data["dropout"] = dropout;
        ctx->saved_data["seed"] = seed;
        return o;
    }

    static variable_list backward(AutogradContext *ctx, variable_list grads)
    {
        const auto saved = ctx->get_saved_variables();
        const at::Tensor &q = saved[0], &o = saved[3], &l = saved[4];
        Communicator &g = tp::capsule_group(ctx->saved_data["group"]);
        const double scale = ctx->saved_data["scale"].toDouble();
        const Visibility vis{ctx->saved_data["causal"].toBool(), ctx->saved_data["window"].toInt()};
        const int32_t n = g.size(), r = g.rank();
        const RingDropout drop{ctx->saved_data["dropout"].toDouble(), ctx->saved_data["seed"].toInt(), 2 * static_cast<int64_t>(n)};
        const at::Tensor dout = grads[0].contiguous();
        const at::Tensor delta = (dout * o).sum(-1); // rowsum(dO * O): the softmax's backward term
        at::Tensor dq = at::zeros_like(q);
        auto qh = q.chunk(2, 2), dqh = dq.chunk(2, 2), doh = dout.chunk(2, 2), lh = l.chunk(2, 2), dh = delta.chunk(2, 2);
        const int64_t c = qh[0].size(2);
        // Keys and values go round as in the forward pass. Their gradients' running sums follow one step behind: each
        // rank computes its part of the block it holds, adds the sum so far from rank - 1 and passes it on, so the
        // transfers run under the next step's products; after the last step the sums go home in one more hop.
        at::Tensor kv = at::stack({saved[1], saved[2]});
        std::optional<Hop> sums;
        for (int32_t step = 0; step < n; ++step) {
            const int32_t j = (r - step + n) % n;
            std::optional<Hop> next;
            if (step + 1 < n) next.emplace(kv, g, kRingTag);
            at::Tensor dkv = at::zeros_like(kv); // this rank's part of block j's key and value gradients
            auto kh = kv[0].chunk(2, 2), vh = kv[1].chunk(2, 2), dkh = dkv[0].chunk(2, 2), dvh = dkv[1].chunk(2, 2);
            for (size_t a = 0; a < 2; ++a)
                for (size_t b = 0; b < 2; ++b) {
                    const int64_t cq = chunks_of(r, n)[a], ck = chunks_of(j, n)[b];
                    const Pair pair = pair_of(cq, ck, c, vis);
                    if (pair == Pair::Skip) continue;
                    // The forward's mask again (the same pairs skipped); lse is finite, so hidden keys give p = 0.
                    at::Tensor p = at::exp(block_scores(qh[a], kh[b], scale, cq, ck, pair, vis) - lh[a].unsqueeze(-1));
                    // With dropout (out = (p x mask) v): dv from the dropped weights, dp = (dO vᵀ) x mask; the
                    // softmax's rowsum(dp x p) is still rowsum(dO x O) = delta.
                    at::Tensor z = p, dp = at::matmul(doh[a], vh[b].transpose(-1, -2));
                    if (drop.p > 0.0) {
                        const at::Tensor m = drop.mask(p, cq, ck);
                        z = p * m;
                        dp = dp * m;
                    }
                    dvh[b].add_(at::matmul(z.transpose(-1, -2), doh[a]));
                    at::Tensor ds = p * (dp - dh[a].unsqueeze(-1));
                    dqh[a].add_(at::matmul(ds, kh[b]) * scale);
                    dkh[b].add_(at::matmul(ds.transpose(-1, -2), qh[a]) * scale);
                }
            if (sums) dkv += sums->arrived(); // block j's sum over ranks j .. r - 1
            if (n == 1) return {dq, dkv[0], dkv[1], at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
            sums.emplace(dkv, g, kRingGradTag);
            if (next) kv = next->arrived();
        }
        const at::Tensor dkv = sums->arrived(); // this rank's own keys' and values' gradients, summed over the ring
        return {dq, dkv[0], dkv[1], at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    }
};

// softmax(mask(q kᵀ x scale)) v, the mask comparing the queries' and keys' whole-sequence positions.
at::Tensor masked_attention(const at::Tensor &q, const at::Tensor &keys, const at::Tensor &values, const at::Tensor &qpos,
                            const at::Tensor &kpos, const AttentionSpec &spec)
{
    at::Tensor att = at::matmul(q, keys.transpose(-1, -2)) * spec.scale;
    if (spec.causal || spec.window > 0) {
        const at::Tensor qp = qpos.unsqueeze(1), kp = kpos.unsqueeze(0);
        at::Tensor hidden = spec.causal ? kp > qp : at::zeros({qp.size(0), kp.size(1)}, q.options().dtype(at::kBool));
        if (spec.window > 0) hidden = hidden | ((qp - kp) >= spec.window);
        att = att.masked_fill(hidden, kNegInf);
    }
    att = spec.float32_softmax ? at::softmax(att, -1, at::kFloat).to(q.scalar_type()) : at::softmax(att, -1);
    if (spec.train && spec.dropout > 0.0) att = at::dropout(att, spec.dropout, true);
    return at::matmul(att.to(values.scalar_type()), values);
}

at::Tensor gathered_attention(const ContextParallel &cp, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                              const AttentionSpec &spec)
{
    const int32_t n = cp.size();
    const int64_t t = q.size(2);
    std::vector<at::Tensor> all;
    for (int32_t j = 0; j < n; ++j) all.push_back(sequence_positions(t, j, n, q.options()));
    return masked_attention(q, tp::gather_sequence(k, cp.group, 2), tp::gather_sequence(v, cp.group, 2),
                            sequence_positions(t, cp.rank(), n, q.options()), at::cat(all), spec);
}

// Ulysses (ulysses.hpp): whole sequences for a share of the heads. Key/value heads travel unrepeated (grouped
// queries: query share j uses exactly key/value share j) and are repeated after the exchange.
at::Tensor ulysses_attention(const ContextParallel &cp, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                             const AttentionSpec &spec)
{
    const at::Tensor hq = sequence_to_heads(q, cp.group, "attention heads");
    const at::Tensor hk = sequence_to_heads(k, cp.group, "key/value heads"), hv = sequence_to_heads(v, cp.group, "key/value heads");
    const int64_t groups = q.size(1) / k.size(1);
    const at::Tensor pos = at::arange(hq.size(2), q.options().dtype(at::kLong));
    const at::Tensor y = masked_attention(hq, hk.repeat_interleave(groups, 1), hv.repeat_interleave(groups, 1), pos, pos, spec);
    return heads_to_sequence(y, cp.group);
}

} // namespace

Strategy parse_strategy(const std::string &name)
{
    if (name == "allgather") return Strategy::AllGather;
    if (name == "alltoall") return Strategy::Ring;
    if (name == "ulysses") return Strategy::Ulysses; // sp_size's (not a cp_comm_strategy)
    fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.cp_handler.cp_comm_strategy: expected \"allgather\" or "
                                     "\"alltoall\", got \"" + name + "\"");
}

const char *strategy_name(Strategy s)
{
    return s == Strategy::Ring ? "alltoall" : s == Strategy::Ulysses ? "ulysses" : "allgather";
}

int32_t ContextParallel::rank() const { return group->rank(); }
int32_t ContextParallel::size() const { return group->size(); }

at::Tensor attention(const ContextParallel &cp, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                     const AttentionSpec &spec)
{
    if (!cp.group) fail(ACCEL_ERR_INTERNAL, "context parallel: no cp group");
    if (q.dim() != 4 || q.size(2) % 2 != 0 || k.dim() != 4 || k.sizes() != v.sizes() || k.size(1) == 0 ||
        q.size(1) % k.size(1) != 0 || k.size(0) != q.size(0) || k.size(2) != q.size(2) || k.size(3) != q.size(3))
        fail(ACCEL_ERR_INTERNAL, "context parallel attention: q [B, H, T, D] (T even) and k, v [B, H / g, T, D] "
                                 "expected, got " + c10::str(q.sizes()) + ", " + c10::str(k.sizes()) + ", " +
                                 c10::str(v.sizes()));
    if (cp.strategy == Strategy::Ulysses) return ulysses_attention(cp, q, k, v, spec);
    if (k.size(1) != q.size(1)) {
        const int64_t groups = q.size(1) / k.size(1);
        return attention(cp, q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1), spec);
    }
    if (cp.strategy == Strategy::AllGather) return gathered_attention(cp, q, k, v, spec);
    const double dropout = spec.train ? spec.dropout : 0.0;
    const int64_t seed = dropout > 0.0 ? draw_seed(spec.generator, spec.stream) : 0;
    if (spec.float32_softmax && q.scalar_type() != at::kFloat) {
        // The blocks' exponentials in float32, as transformers' softmax(dtype=float32); the result back in q's type.
        return RingAttention::apply(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), cp.group, spec.scale, spec.causal,
                                    spec.window, dropout, seed)
            .to(q.scalar_type());
    }
    return RingAttention::apply(q, k, v, cp.group, spec.scale, spec.causal, spec.window, dropout, seed);
}

} // namespace accel::parallel::cp
