// The vocabulary split over the tp group (Megatron's VocabParallelEmbedding and vocab_parallel_cross_entropy):
// rank r holds rows [vocab_start, vocab_start + V/tp) of the (padded) vocabulary, of the token embedding and
// of the tied head, so that no rank ever holds the whole embedding's gradient nor the whole logits [B, T, V].
#pragma once

#include "parallel/tensor_parallel/mappings.hpp"

#include <ATen/ATen.h>

#include <cstdint>

namespace accel::parallel::tp {

// The vocabulary rounded up so that it divides by tp (Megatron pads it the same way; the padding rows are
// never predicted, never saved).
int64_t padded_vocab_size(int64_t vocab_size, int64_t tp);

// ids [...] (whole-vocabulary token ids) -> [..., C]: each rank looks up the ids it holds (zeros for the
// others) and the partial embeddings are all-reduced. `weight`: this rank's rows [V/tp, C]. `padding_idx`
// (a whole-vocabulary id, -1: none): its row gets no gradient, as at::embedding's padding_idx (Llama's pad token).
at::Tensor vocab_parallel_embedding(const at::Tensor &ids, const at::Tensor &weight, int64_t vocab_start,
                                    const Group &group, int64_t padding_idx = -1);

struct VocabParallelLossOptions {
    int64_t vocab_start = 0;
    int64_t vocab_size = -1; // the unpadded vocabulary; columns at or past it are never predicted (-1: none padded)
    int64_t ignore_index = -100;
};

// Cross-entropy of logits split over the vocabulary: `logits` [..., V/tp] this rank's columns, `target` [...]
// whole-vocabulary ids (or ignore_index), the same on every rank. The row maxima and the sums of exponentials
// are all-reduced, and the target's logit comes from the rank that holds it. Per-token losses [...], 0 at
// ignored positions, equal on every rank; differentiable in `logits` (the gradient is this rank's columns of
// softmax - one_hot). INVALID_ARGUMENT for a target outside the vocabulary.
at::Tensor vocab_parallel_cross_entropy_per_token(const at::Tensor &logits, const at::Tensor &target,
                                                  const Group &group, const VocabParallelLossOptions &options);
// The mean over the positions not ignored: at::cross_entropy's default reduction.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor &logits, const at::Tensor &target, const Group &group,
                                        const VocabParallelLossOptions &options);

} // namespace accel::parallel::tp
