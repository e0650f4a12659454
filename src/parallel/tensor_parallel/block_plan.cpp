#include "parallel/tensor_parallel/block_plan.hpp"

#include "common/error.hpp"
#include "distributed/communicator.hpp"
#include "model/transformer_block.hpp"

#include <utility>

namespace accel::parallel::tp {

void check_block(const TransformerBlock &block, const BlockModules &names, BlockSplit split, int64_t tp_size,
                 const std::string &heads_key, const std::string &inner_key, const LinearPlanOptions &layer)
{
    if (split.attention) {
        require_divides(heads_key, block.options.n_head, tp_size);
        check_parallelizable(*block.qkv, names.qkv, layer);
        check_parallelizable(*block.out_proj, names.out_proj, layer);
    }
    if (split.mlp) {
        require_divides(inner_key, block.fc1->out_features(), tp_size);
        check_parallelizable(*block.fc1, names.fc1, layer);
        check_parallelizable(*block.fc2, names.fc2, layer);
    }
}

void parallelize_block(TransformerBlock &block, const BlockModules &names, BlockSplit split, const Group &group,
                       std::map<std::string, ParameterSlicing> &plan, const LinearPlanOptions &layer,
                       std::shared_ptr<DropoutGenerator> dropout)
{
    LinearPlanOptions rowwise = layer; // a rowwise layer's input is this rank's heads / features
    rowwise.dropout = dropout;
    if (split.attention) {
        LinearPlanOptions by_heads = layer;
        by_heads.groups = 3; // [q | k | v]: each rank gets its heads' q, k and v
        parallelize_linear(block.qkv, names.qkv, LinearStyle::Colwise, group, plan, by_heads);
        parallelize_linear(block.out_proj, names.out_proj, LinearStyle::Rowwise, group, plan, rowwise);
        block.options.tp_size = group->size();
    }
    if (split.mlp) {
        parallelize_linear(block.fc1, names.fc1, LinearStyle::Colwise, group, plan, layer);
        parallelize_linear(block.fc2, names.fc2, LinearStyle::Rowwise, group, plan, rowwise);
    }
    block.options.mlp_replicated = !split.mlp;
    block.options.tp_dropout = std::move(dropout);
}

} // namespace accel::parallel::tp
