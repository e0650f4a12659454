// Dropout under tensor parallelism (Megatron's model-parallel RNG tracker). Where a tp rank holds a part of an
// activation that is split across the group (the attention probabilities of its heads, the MLP's hidden features
// of its columns, the positions of its sequence shard under sequence parallelism), each rank must draw its own
// mask: those draws come from a generator of the group's rank, seeded seed + 2718 + tp_rank as Megatron does.
// Where the activation is replicated (the residual stream without sequence parallelism, the embeddings) every rank
// draws the same mask from the default generator, which every rank seeded alike and advances alike (the split
// draws do not touch it, so it follows the one-process sequence).
#pragma once

#include "model/activation_checkpoint.hpp"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

namespace accel::parallel::tp {

class DropoutGenerator {
public:
    // seed: the default generator's seed (what set_seed gave every rank); rank: the tp rank.
    DropoutGenerator(uint64_t seed, int64_t rank);
    // x with each element zeroed with probability p (drawn from this rank's generator) and the rest scaled by
    // 1 / (1 - p), as at::dropout in training.
    at::Tensor dropout(const at::Tensor &x, double p);
    // The generator's state, for activation checkpointing's rerun of a layer (the same masks again).
    at::Tensor state() const;
    void set_state(const at::Tensor &state);
    uint64_t seed() const { return seed_; }

private:
    uint64_t seed_;
    at::Generator generator_;
};

// A generator for this tp rank, seeded from the default CPU generator's current seed.
std::shared_ptr<DropoutGenerator> make_dropout_generator(int64_t tp_rank);

// Dropout in training (p > 0) from `split` when given (a split region), else from the default generator.
at::Tensor region_dropout(const at::Tensor &x, double p, bool train, const std::shared_ptr<DropoutGenerator> &split);

// `g` as a generator that a recomputation (activation checkpointing) sets back to its forward state around the
// rerun, so that a split region's masks are drawn again alike.
ExtraGenerator checkpoint_generator(const std::shared_ptr<DropoutGenerator> &g);

} // namespace accel::parallel::tp
