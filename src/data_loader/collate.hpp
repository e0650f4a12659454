// Collating samples into a batch (PyTorch's default_collate and transformers' padding collators): "stack"
// for samples of one shape, "pad" for variable-length token sequences (DataCollatorWithPadding's padding,
// DataCollatorForSeq2Seq's label_pad_token_id, and a causal-LM shift as accel's token loaders make it).
#pragma once

#include "config/dataloader_options.hpp"
#include "data_loader/dataset.hpp"

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace accel {

// One sample as the caller's dataset returns it.
struct Sample {
    at::Tensor inputs;
    at::Tensor labels; // undefined when the dataset has no labels
};

using config::CollateOptions;

// Collates `samples`; `ids[i]` names sample i in errors ("sample <id>"), e.g. its dataset index.
Batch collate_samples(const std::vector<Sample> &samples, const std::vector<int64_t> &ids, const CollateOptions &options);

} // namespace accel
