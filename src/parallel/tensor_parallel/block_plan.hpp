// accel's transformer block (model/transformer_block.hpp) split over a tp group, shared by the gpt's plan and the
// JSON spec's transformer_encoder_layer: the fused q/k/v projection column-wise by heads (its [q | k | v] blocks
// split alike: each rank holds its heads' q, k and v), the attention's output projection row-wise, the MLP's first
// linear column-wise and its second row-wise. Either region may stay replicated (a tp_plan override: tp_plan.hpp).
#pragma once

#include "parallel/tensor_parallel/plan_linear.hpp"

#include <map>
#include <memory>
#include <string>

namespace accel {
struct TransformerBlock;
}

namespace accel::parallel::tp {

class DropoutGenerator;

// The modules of the block's four linears, as the model names them (their parameters "<name>.weight" / ".bias").
struct BlockModules {
    std::string qkv, out_proj, fc1, fc2;
};

struct BlockSplit {
    bool attention = true, mlp = true; // false: replicated (whole on every rank)
};

// Checks the sizes first (INVALID_ARGUMENT naming `heads_key` / `inner_key` and their values when they do not divide
// by the group's size) and every linear as `layer` would split it (check_parallelizable), before any block is
// split; parallelize_block then splits: the block computes this rank's heads and hidden features, drawing dropout
// in the split regions from `dropout`.
void check_block(const TransformerBlock &block, const BlockModules &names, BlockSplit split, int64_t tp_size,
                 const std::string &heads_key, const std::string &inner_key, const LinearPlanOptions &layer);
void parallelize_block(TransformerBlock &block, const BlockModules &names, BlockSplit split, const Group &group,
                       std::map<std::string, ParameterSlicing> &plan, const LinearPlanOptions &layer,
                       std::shared_ptr<DropoutGenerator> dropout);

} // namespace accel::parallel::tp
