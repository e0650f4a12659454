// Attention computed exactly over a sequence split by context parallelism (sequence_split.hpp): each rank holds
// its part of the queries, keys and values, and gets its queries' rows of the whole sequence's attention.
// Two strategies, as Accelerate's TorchContextParallelConfig.cp_comm_strategy names torch's rotate methods:
//
//   "allgather"  the keys and values are all-gathered over the cp group before the product (an autograd
//                mapping whose backward reduce-scatters their gradients); the causal mask compares whole-sequence
//                positions. Simple; every rank holds the whole sequence's K/V while a layer runs.
//   "alltoall"   ring attention: the K/V parts travel round the cp group by send/recv (rank r to r + 1), each
//                rank merging the blocks with an online softmax (running log-sum-exp), chunk pairs wholly above
//                the diagonal (or wholly outside a sliding window) skipped; backward recomputes the blocks from the saved log-sum-exp and sends the
//                K/V gradients round the ring with them, home after a last hop; attention dropout redraws each
//                pair's mask from a per-call seed (AttentionSpec::generator). Nothing of size T x T is kept
//                for backward (torch's "alltoall" rotater likewise passes K/V shards between neighbours).
//   "ulysses"    parallelism_config.sp_size (ulysses.hpp): all-to-all from sequence shards to head shards,
//                attention over whole sequences, all-to-all back. Not a cp_comm_strategy: sp_size selects it.
#pragma once

#include <ATen/ATen.h>

#include <memory>
#include <optional>
#include <string>

namespace accel::distributed {
class Communicator;
}

namespace accel::parallel::cp {

enum class Strategy { AllGather, Ring, Ulysses };
// "allgather" -> AllGather, "alltoall" -> Ring, "ulysses" -> Ulysses; INVALID_ARGUMENT naming cp_comm_strategy
// otherwise.
Strategy parse_strategy(const std::string &name);
const char *strategy_name(Strategy s);

struct ContextParallel {
    std::shared_ptr<distributed::Communicator> group; // the mesh's cp group
    Strategy strategy = Strategy::AllGather;
    int32_t rank() const;
    int32_t size() const;
};

struct AttentionSpec {
    double scale = 1.0;       // scores = (q kᵀ) x scale
    bool causal = true;       // query at position i sees keys at positions <= i
    int64_t window = 0;       // > 0: it also stops seeing keys at i - window and before
    double dropout = 0.0;     // on the attention weights while training
    bool train = false;
    // The ring's dropout: one seed per call drawn from this generator (none: the default one, as "allgather"'s
    // dropout draws from it), each chunk pair's mask a function of that seed and the pair, drawn again in backward.
    std::optional<at::Generator> generator;
    // Mixed into the ring's mask seeds: under tensor parallelism the tp rank's dropout seed (rng_tracker.hpp), so
    // that each rank's heads get masks of their own as in one process (0: none).
    uint64_t stream = 0;
    bool float32_softmax = false; // the softmax computed in float32 (transformers' Llama)
};

// q [B, H, T_local, D], k and v [B, H / g, T_local, D] (g query heads per key/value head), laid out as
// sequence_split lays out the sequence -> [B, H, T_local, D].
at::Tensor attention(const ContextParallel &cp, const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                     const AttentionSpec &spec);

} // namespace accel::parallel::cp
