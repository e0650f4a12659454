#include "config/tp_plan_config.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <utility>

namespace accel::config {

namespace {

constexpr std::pair<const char *, TpStyle> kStyles[] = {
    {"colwise", TpStyle::Colwise},       {"rowwise", TpStyle::Rowwise},
    {"colwise_rep", TpStyle::ColwiseRep}, {"replicate", TpStyle::Replicate},
    {"sequence_parallel", TpStyle::SequenceParallel},
};

// transformers' other ParallelInterface styles: known, not built here.
constexpr const char *kNotBuilt[] = {"rowwise_rep", "local_colwise", "local_rowwise", "local", "gather", "local_packed_rowwise",
                                     "packed_colwise", "packed_rowwise", "isolated", "ep_router", "grouped_gemm"};

} // namespace

TpStyle parse_tp_style(const std::string &value, const std::string &path)
{
    for (const auto &[name, style] : kStyles)
        if (value == name) return style;
    for (const char *name : kNotBuilt)
        if (value == name)
            fail(ACCEL_ERR_UNIMPLEMENTED, path + ": the tp_plan style \"" + value + "\" is not built (built: colwise, "
                                                 "rowwise, colwise_rep, replicate, sequence_parallel)");
    fail(ACCEL_ERR_INVALID_ARGUMENT, path + ": unknown tp_plan style \"" + value + "\" (expected colwise, rowwise, "
                                            "colwise_rep, replicate or sequence_parallel)");
}

const char *tp_style_name(TpStyle style)
{
    for (const auto &[name, s] : kStyles)
        if (s == style) return name;
    return "?";
}

void parse_tp_plan(JsonObject &o, const char *key, TpPlan &plan)
{
    const cJSON *node = o.get_raw(key);
    if (node == nullptr || cJSON_IsNull(node)) return;
    // transformers' from_pretrained(tp_plan="auto"): the model's own plan, which prepare applies anyway.
    if (cJSON_IsString(node) && std::string(node->valuestring) == "auto") return;
    if (!cJSON_IsObject(node)) type_error(o.path_of(key), "\"auto\" or an object of module-name patterns to tp_plan styles", node);
    const cJSON *item = nullptr;
    cJSON_ArrayForEach(item, node)
    {
        const std::string path = o.path_of(key) + "." + item->string;
        if (!cJSON_IsString(item)) type_error(path, "a tp_plan style (a string)", item);
        if (*item->string == '\0') fail(ACCEL_ERR_INVALID_ARGUMENT, path + ": expected a module-name pattern, got \"\"");
        plan.push_back({item->string, parse_tp_style(item->valuestring, path), path});
    }
}

} // namespace accel::config
