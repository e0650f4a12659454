// The tensor-parallel plan of a JSON-spec model (a sequence of layers): each `linear` layer's "tp_plan" ("colwise",
// "rowwise", "colwise_rep", "replicate"), each `transformer_encoder_layer`'s ("auto": heads split, MLP column- then
// row-wise; "replicate"), and the spec's top-level tp_plan patterns over the layer names ("0", "2", ...), which
// win over the layers' own entries. Checked as a whole before anything is split:
//   - a colwise layer opens a split region (its outputs are this rank's columns) that a rowwise layer closes;
//     between them only elementwise activations (relu, gelu, tanh, sigmoid) and dropout; a dropout with p > 0 there
//     is SplitDropout: it acts on this rank's features, so it draws from the rank's tp generator (rng_tracker.hpp),
//     while a dropout outside the regions acts on a replicated activation and draws from the default generator;
//   - rowwise without an open region (its input is whole), a region left open at the end, or another layer inside
//     one: INVALID_ARGUMENT naming the layer; split sizes not divisible by tp: INVALID_ARGUMENT naming the key;
//   - no layer split at all: INVALID_ARGUMENT (tp_size > 1 would only replicate the model).
#pragma once

#include "config/tp_plan_config.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace accel::parallel::tp {

struct SequentialLayer {
    std::string type;       // the spec's layer type
    std::string tp_plan;    // the layer's own entry ("" when none)
    int64_t in_features = 0, out_features = 0; // linear
    int64_t nhead = 0, dim_feedforward = 0;    // transformer_encoder_layer
    double p = 0.0;                            // dropout
    bool batch_first = false;                  // transformer_encoder_layer: [B, T, C] (else [T, B, C])
};

enum class LayerSplit { None, Colwise, ColwiseRep, Rowwise, Block, SplitDropout };

std::vector<LayerSplit> plan_sequential(std::vector<SequentialLayer> layers, const config::TpPlan &overrides,
                                        int64_t tp_size);

// Sequence parallelism (tp_handler.sequence_parallel) over a plan: the positions are this rank's 1/tp from the
// first split block to the last, which must be a run of "auto" transformer_encoder_layer blocks of one layout
// with only relu, gelu, tanh, sigmoid and dropout between them (their dropouts become SplitDropout: each rank's
// positions, each rank's masks). Split linear layers under it, another layer inside the run or a run of mixed
// layouts: UNIMPLEMENTED naming the layer and tp_handler.sequence_parallel.
struct SequenceRegion {
    size_t first = 0, last = 0; // the first and last split block
    int64_t sequence_dim = 0;   // of the blocks' [T, B, C] (0) or batch_first [B, T, C] (1) activations
};
SequenceRegion plan_sequence_parallel(const std::vector<SequentialLayer> &layers, std::vector<LayerSplit> &splits);

} // namespace accel::parallel::tp
