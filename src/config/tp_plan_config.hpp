// transformers' tensor-parallel plan vocabulary (`tp_plan` / `base_model_tp_plan`: module-name patterns mapped to
// a style), as the model spec carries it to the model's plan (parallel/tensor_parallel/tp_plan.hpp), which maps
// the patterns onto its modules at prepare.
#pragma once

#include <string>
#include <vector>

namespace accel::config {

class JsonObject;

// The styles accel builds (transformers' names): colwise (outputs split), rowwise (inputs split; for an
// embedding, the vocabulary split), colwise_rep (outputs split, gathered afterwards: transformers' lm_head),
// replicate (whole on every rank), sequence_parallel (a norm on this rank's sequence shard).
enum class TpStyle { Colwise, Rowwise, ColwiseRep, Replicate, SequenceParallel };

struct TpPlanEntry {
    std::string pattern; // "model.layers.*.self_attn.q_proj", or relative to the base model ("layers.*...")
    TpStyle style = TpStyle::Replicate;
    std::string path;    // the JSON path it came from, for messages ("tp_plan.layers.*.mlp.up_proj")
};
// In the order given: a later entry matching the same module wins (as a dict update).
using TpPlan = std::vector<TpPlanEntry>;

// `value` as a style; INVALID_ARGUMENT naming `path` for an unknown one, UNIMPLEMENTED for transformers' styles
// accel does not build (local_colwise, rowwise_rep, gather, ...).
TpStyle parse_tp_style(const std::string &value, const std::string &path);
const char *tp_style_name(TpStyle style);

// The object under `key` ({"pattern": "style", ...}), appended to `plan`; nothing when absent, null or "auto".
void parse_tp_plan(JsonObject &o, const char *key, TpPlan &plan);

} // namespace accel::config
