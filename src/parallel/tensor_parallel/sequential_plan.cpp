#include "parallel/tensor_parallel/sequential_plan.hpp"

#include "common/error.hpp"
#include "parallel/tensor_parallel/plan_linear.hpp"
#include "parallel/tensor_parallel/tp_plan.hpp"

#include <algorithm>

namespace accel::parallel::tp {

namespace {

using config::TpStyle;

std::string layer_name(size_t i, const SequentialLayer &l)
{
    return "layers[" + std::to_string(i) + "] (" + l.type + (l.tp_plan.empty() ? "" : ", tp_plan \"" + l.tp_plan + "\"") + ")";
}

// The spec's top-level patterns onto the layers' own entries.
void apply_overrides(std::vector<SequentialLayer> &layers, const config::TpPlan &overrides)
{
    for (const auto &o : overrides) {
        bool matched = false;
        for (size_t i = 0; i < layers.size(); ++i) {
            auto &l = layers[i];
            if ((l.type != "linear" && l.type != "transformer_encoder_layer") || !module_matches(o.pattern, std::to_string(i)))
                continue;
            matched = true;
            if (l.type == "linear" && o.style != TpStyle::SequenceParallel) {
                l.tp_plan = config::tp_style_name(o.style);
            } else if (l.type == "linear") {
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path + ": layers[" + std::to_string(i) + "] is a linear layer, whose "
                                                 "tp_plan is colwise, rowwise, colwise_rep or replicate");
            } else if (o.style == TpStyle::Replicate) {
                l.tp_plan = "replicate";
            } else {
                fail(ACCEL_ERR_INVALID_ARGUMENT, o.path + ": layers[" + std::to_string(i) + "] is a transformer_encoder_layer, "
                                                 "whose tp_plan is \"auto\" (its own entry) or \"replicate\"");
            }
        }
        if (!matched)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path + ": the pattern \"" + o.pattern + "\" matches no linear or "
                                             "transformer_encoder_layer layer (they are named by index: \"0\", \"1\", ...)");
    }
}

} // namespace

std::vector<LayerSplit> plan_sequential(std::vector<SequentialLayer> layers, const config::TpPlan &overrides,
                                        int64_t tp_size)
{
    apply_overrides(layers, overrides);
    auto divides = [tp_size](size_t i, const char *key, int64_t value) {
        require_divides("layers[" + std::to_string(i) + "]." + key, value, tp_size);
    };
    const std::vector<std::string> elementwise = {"relu", "gelu", "tanh", "sigmoid"};
    std::vector<LayerSplit> out(layers.size(), LayerSplit::None);
    long open = -1; // the colwise layer whose split outputs flow on
    for (size_t i = 0; i < layers.size(); ++i) {
        const SequentialLayer &l = layers[i];
        const std::string here = layer_name(i, l);
        const std::string inside = open < 0 ? "" : layer_name(static_cast<size_t>(open), layers[static_cast<size_t>(open)]);
        if (l.type == "linear" && l.tp_plan == "rowwise") {
            if (open < 0)
                fail(ACCEL_ERR_INVALID_ARGUMENT, here + ": rowwise needs a split input (a colwise layer before it), "
                                                        "and this layer's input is whole on every rank");
            divides(i, "in_features", l.in_features);
            out[i] = LayerSplit::Rowwise;
            open = -1;
            continue;
        }
        if (open >= 0) {
            if (std::find(elementwise.begin(), elementwise.end(), l.type) != elementwise.end()) continue;
            if (l.type == "dropout") {
                if (l.p > 0.0) out[i] = LayerSplit::SplitDropout;
                continue;
            }
            fail(ACCEL_ERR_INVALID_ARGUMENT, here + ": sits between " + inside + " and a rowwise layer, where each rank "
                                                    "holds a slice of the features; only relu, gelu, tanh, sigmoid and "
                                                    "dropout may (end the region with a rowwise linear first)");
        }
        if (l.type == "linear" && (l.tp_plan == "colwise" || l.tp_plan == "colwise_rep")) {
            divides(i, "out_features", l.out_features);
            out[i] = l.tp_plan == "colwise" ? LayerSplit::Colwise : LayerSplit::ColwiseRep;
            if (l.tp_plan == "colwise") open = static_cast<long>(i);
        } else if (l.type == "linear" && !l.tp_plan.empty() && l.tp_plan != "replicate") {
            fail(ACCEL_ERR_INVALID_ARGUMENT, here + ": a linear layer's tp_plan is colwise, rowwise, colwise_rep or "
                                                    "replicate");
        } else if (l.type == "transformer_encoder_layer" && l.tp_plan == "auto") {
            divides(i, "nhead", l.nhead);
            divides(i, "dim_feedforward", l.dim_feedforward);
            out[i] = LayerSplit::Block;
        }
    }
    if (open >= 0)
        fail(ACCEL_ERR_INVALID_ARGUMENT, layer_name(static_cast<size_t>(open), layers[static_cast<size_t>(open)]) +
                                             ": colwise leaves its outputs split, and no rowwise linear follows to join "
                                             "them (end the region with one, or use colwise_rep)");
    if (std::all_of(out.begin(), out.end(), [](LayerSplit s) { return s == LayerSplit::None; }))
        fail(ACCEL_ERR_INVALID_ARGUMENT, "parallelism_config.tp_size (" + std::to_string(tp_size) + "): the JSON-spec "
                                         "model splits no layer; give its linear layers a \"tp_plan\" (\"colwise\" then "
                                         "\"rowwise\") or its transformer_encoder_layer layers \"tp_plan\": \"auto\"");
    return out;
}

SequenceRegion plan_sequence_parallel(const std::vector<SequentialLayer> &layers, std::vector<LayerSplit> &splits)
{
    const std::string key = "parallelism_config.tp_handler.sequence_parallel: ";
    auto refuse = [&](size_t i, const std::string &why) {
        fail(ACCEL_ERR_UNIMPLEMENTED, key + layer_name(i, layers[i]) + ": " + why + " (sequential models split "
                                      "the positions over a run of \"auto\" transformer_encoder_layer blocks only)");
    };
    std::vector<size_t> blocks;
    for (size_t i = 0; i < splits.size(); ++i) {
        if (splits[i] == LayerSplit::Block) blocks.push_back(i);
        else if (splits[i] != LayerSplit::None) refuse(i, "a split linear layer under sequence parallelism is not built yet");
    }
    if (blocks.empty()) fail(ACCEL_ERR_INTERNAL, key + "a plan without split layers"); // plan_sequential refuses it
    const std::vector<std::string> between = {"relu", "gelu", "tanh", "sigmoid", "dropout"};
    SequenceRegion region{blocks.front(), blocks.back(), layers[blocks.front()].batch_first ? 1 : 0};
    for (size_t i = region.first; i <= region.last; ++i) {
        const SequentialLayer &l = layers[i];
        if (splits[i] == LayerSplit::Block) {
            if (l.batch_first != layers[region.first].batch_first)
                refuse(i, "its batch_first differs from layers[" + std::to_string(region.first) + "]'s, and the run's "
                          "positions are split along one dimension");
        } else if (std::find(between.begin(), between.end(), l.type) == between.end()) {
            refuse(i, "sits between split transformer blocks, where each rank holds a shard of the positions; only "
                      "relu, gelu, tanh, sigmoid and dropout may");
        } else if (l.type == "dropout" && l.p > 0.0) {
            splits[i] = LayerSplit::SplitDropout; // this rank's positions: its own masks, as the blocks' residual
        }
    }
    return region;
}

} // namespace accel::parallel::tp
