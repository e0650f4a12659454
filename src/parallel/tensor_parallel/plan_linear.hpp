// One linear of a model's tensor-parallel plan (transformers' tp_plan styles "colwise" and "rowwise"), shared by
// the models' plans so that each only names its linears:
//   colwise: weight (and bias) split along the outputs (in `groups` equal blocks split alike: GPT-2's fused
//            [q | k | v]), the layer becomes column parallel (parallel_linear.hpp);
//   rowwise: weight split along the inputs, the bias whole, the layer becomes row parallel.
// A LoRA adapter on the linear (model/lora_linear.hpp) stays outside the parallel layer and is split with it:
//   colwise: lora_A whole (replicated), lora_B split by output rows; A's output goes through copy_to_region
//            (identity forward, gradient all-reduced), so A's gradient is the whole one on every rank and the
//            input gradient of the adapter path is not summed twice;
//   rowwise: lora_A split by input columns, lora_B whole; A's partial products are all-reduced
//            (reduce_from_region) before B, so B's gradient is the whole one on every rank.
// lora_dropout acts on the layer's input: replicated before a colwise layer (the default generator, one mask on
// every rank), this rank's features before a rowwise one (the rank's tp generator, rng_tracker.hpp).
// The extra all-reduce is of [.., r] values (r the adapter rank), small beside the layer's own.
#pragma once

#include "model/linear.hpp"
#include "parallel/tensor_parallel/mappings.hpp"
#include "parallel/tensor_parallel/parallel_linear.hpp"
#include "parallel/tensor_parallel/slicing.hpp"

#include <map>
#include <memory>
#include <string>

namespace accel::parallel::tp {

class DropoutGenerator;

enum class LinearStyle { Colwise, Rowwise };

struct LinearPlanOptions {
    int64_t groups = 1;                  // colwise: equal blocks of the outputs split alike
    ColumnParallelOptions column;        // colwise
    RowParallelOptions row;              // rowwise
    // rowwise: the rank's generator for a LoRA adapter's dropout on the split input (the model's tp generator).
    std::shared_ptr<DropoutGenerator> dropout;
};

// Splits the linear in `slot` (the model's slot, registered under `module`: its parameters are "<module>.weight",
// "<module>.bias", "<module>.lora_A.weight", "<module>.lora_B.weight") over `group` in `style`: each split tensor
// is narrowed in place (set_data: the model's tensors keep their identity) and recorded in `plan`, and the slot
// gets the parallel layer. UNIMPLEMENTED naming the module for fp8 layers and LoRA under sequence parallelism.
// A rowwise LoRA adapter with lora_dropout > 0 needs options.dropout (INTERNAL without: the model's plan passes it).
// The refusals of parallelize_linear alone (no change): a plan checks every linear first, so that a refused
// one leaves the model unsplit.
void check_parallelizable(const Linear &linear, const std::string &module, const LinearPlanOptions &options = {});

// INVALID_ARGUMENT naming `key` and its value unless `value` (heads, features) divides by the tp group's size.
void require_divides(const std::string &key, int64_t value, int64_t tp_size);

void parallelize_linear(std::shared_ptr<Linear> &slot, const std::string &module, LinearStyle style, const Group &group,
                        std::map<std::string, ParameterSlicing> &plan, const LinearPlanOptions &options = {});

} // namespace accel::parallel::tp
