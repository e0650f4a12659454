// A model's tensor-parallel plan with the user's tp_plan overrides (transformers' vocabulary, by module-name
// pattern; config/tp_plan_config.hpp) mapped onto it. The model lists its planned modules with their built-in
// styles; the overrides may change what the model can compute otherwise:
//   - a region (one attention, one MLP: its input linears and its output linear) is split (inputs colwise,
//     output rowwise: the built-in plan) or replicated (every linear "replicate": whole on every rank, no
//     communication). Mixing the two inside a region, "rowwise" on a linear whose input is whole, or "colwise" on
//     a region's output (the residual stream it joins is whole) is INVALID_ARGUMENT naming the module;
//   - any other module (embeddings, head, norms) keeps its built-in style; a value naming it (see `also`) is
//     accepted, another UNIMPLEMENTED naming the module.
// A pattern matches a module when it matches the whole name or the name after the base model's prefix
// (transformers' base_model_tp_plan: "layers.*.mlp.up_proj" for "model.layers.3.mlp.up_proj"); "*" matches
// within one dot-separated part. A pattern matching no module is INVALID_ARGUMENT naming it.
#pragma once

#include "config/tp_plan_config.hpp"

#include <string>
#include <vector>

namespace accel::parallel::tp {

struct PlanModule {
    std::string name;                 // the module's name in the model ("model.layers.0.self_attn.q_proj")
    config::TpStyle style;            // its built-in style
    std::vector<config::TpStyle> also; // other values naming the same thing (lm_head: colwise and colwise_rep)
    int region = -1;                  // >= 0: the attention or MLP it belongs to
    bool region_output = false;       // the region's last linear (row-parallel when split)
};

struct ResolvedPlan {
    std::vector<bool> region_split; // per region: split over the tp group, else replicated
    bool overridden = false;        // some region differs from the built-in plan
};

// Each module's style after `overrides`, checked as above; `base_prefix`: "model." / "transformer.".
ResolvedPlan resolve_plan(const std::vector<PlanModule> &modules, int regions, const config::TpPlan &overrides,
                          const std::string &base_prefix);

// Whether `pattern` matches `name` ("*" within one dot-separated part).
bool module_matches(const std::string &pattern, const std::string &name);

} // namespace accel::parallel::tp
