#include "parallel/tensor_parallel/tp_plan.hpp"

#include "common/error.hpp"

#include <algorithm>
#include <fnmatch.h>

namespace accel::parallel::tp {

namespace {

using config::TpStyle;

std::vector<std::string> parts(const std::string &s)
{
    std::vector<std::string> out(1);
    for (char c : s) {
        if (c == '.') out.emplace_back();
        else out.back() += c;
    }
    return out;
}

std::string quoted(const PlanModule &m, TpStyle s) { return m.name + " (\"" + config::tp_style_name(s) + "\")"; }

// The region's linears' styles checked against each other: true when split.
bool region_is_split(const std::vector<const PlanModule *> &members, const std::vector<TpStyle> &styles)
{
    const PlanModule *first_input = nullptr;
    TpStyle input_style = TpStyle::Colwise;
    for (size_t i = 0; i < members.size(); ++i) {
        const PlanModule &m = *members[i];
        const TpStyle s = styles[i];
        const std::string where = "tp_plan: " + quoted(m, s) + ": ";
        if (s == TpStyle::SequenceParallel || s == TpStyle::ColwiseRep)
            fail(s == TpStyle::ColwiseRep ? ACCEL_ERR_UNIMPLEMENTED : ACCEL_ERR_INVALID_ARGUMENT,
                 where + "a linear inside an attention or MLP is colwise, rowwise or replicate here");
        if (m.region_output) continue;
        if (s == TpStyle::Rowwise)
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + "rowwise needs a split input, and this layer's input (the hidden "
                                                     "states) is whole on every rank; use colwise or replicate");
        if (first_input == nullptr) {
            first_input = &m;
            input_style = s;
        } else if (s != input_style) {
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + "the input linears of one attention or MLP are split alike, but " +
                                                 quoted(*first_input, input_style) + " differs");
        }
    }
    const bool split = input_style == TpStyle::Colwise;
    for (size_t i = 0; i < members.size(); ++i) {
        const PlanModule &m = *members[i];
        if (!m.region_output) continue;
        const TpStyle s = styles[i];
        const std::string where = "tp_plan: " + quoted(m, s) + ": ";
        if (s == TpStyle::Colwise)
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + "its output joins the residual stream, which is whole on every "
                                                     "rank; use rowwise (after colwise layers) or replicate");
        if (split && s != TpStyle::Rowwise)
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + "its input is split by " + quoted(*first_input, input_style) +
                                                 ", so it must be rowwise (or replicate the whole region)");
        if (!split && s != TpStyle::Replicate)
            fail(ACCEL_ERR_INVALID_ARGUMENT, where + "rowwise needs a split input, but " +
                                                 quoted(*first_input, input_style) + " leaves it whole");
    }
    return split;
}

} // namespace

bool module_matches(const std::string &pattern, const std::string &name)
{
    const auto p = parts(pattern), n = parts(name);
    if (p.size() != n.size()) return false;
    for (size_t i = 0; i < p.size(); ++i)
        if (fnmatch(p[i].c_str(), n[i].c_str(), 0) != 0) return false;
    return true;
}

ResolvedPlan resolve_plan(const std::vector<PlanModule> &modules, int regions, const config::TpPlan &overrides,
                          const std::string &base_prefix)
{
    std::vector<TpStyle> styles;
    for (const auto &m : modules) styles.push_back(m.style);
    for (const auto &o : overrides) {
        bool matched = false;
        for (size_t i = 0; i < modules.size(); ++i) {
            const std::string &name = modules[i].name;
            const bool based = name.compare(0, base_prefix.size(), base_prefix) == 0 &&
                               module_matches(o.pattern, name.substr(base_prefix.size()));
            if (!module_matches(o.pattern, name) && !based) continue;
            matched = true;
            styles[i] = o.style;
        }
        if (!matched)
            fail(ACCEL_ERR_INVALID_ARGUMENT, o.path + ": the pattern \"" + o.pattern + "\" matches no module of the "
                                             "model's tensor-parallel plan (e.g. " + modules.front().name + ")");
    }
    ResolvedPlan out;
    std::vector<std::vector<const PlanModule *>> members(static_cast<size_t>(regions));
    std::vector<std::vector<TpStyle>> member_styles(static_cast<size_t>(regions));
    for (size_t i = 0; i < modules.size(); ++i) {
        const PlanModule &m = modules[i];
        if (m.region >= 0) {
            members[static_cast<size_t>(m.region)].push_back(&m);
            member_styles[static_cast<size_t>(m.region)].push_back(styles[i]);
            continue;
        }
        if (styles[i] == m.style || std::find(m.also.begin(), m.also.end(), styles[i]) != m.also.end()) continue;
        const bool sp = styles[i] == TpStyle::SequenceParallel || m.style == TpStyle::SequenceParallel;
        fail(ACCEL_ERR_UNIMPLEMENTED, "tp_plan: " + quoted(m, styles[i]) + ": this module is " +
                                          config::tp_style_name(m.style) + " in the model's plan, and no other style is "
                                          "built for it" +
                                          (sp ? " (sequence parallelism is parallelism_config.tp_handler."
                                                "sequence_parallel, for the whole model)"
                                              : ""));
    }
    for (const auto &r : members)
        if (r.empty()) fail(ACCEL_ERR_INTERNAL, "tp_plan: a region of the model's plan without modules");
    for (size_t r = 0; r < members.size(); ++r) {
        out.region_split.push_back(region_is_split(members[r], member_styles[r]));
        out.overridden = out.overridden || !out.region_split.back();
    }
    return out;
}

} // namespace accel::parallel::tp
