#include "config/generation_config.hpp"

#include "config/json.hpp"

namespace accel::config {

GenerationConfig parse_generation_config(const char *json)
{
    JsonDocument doc(json == nullptr ? "{}" : json, "options_json");
    JsonObject o(doc.root(), "");
    GenerationConfig g;
    g.max_new_tokens = o.get_int("max_new_tokens", g.max_new_tokens, 0, int64_t(1) << 31);
    g.do_sample = o.get_bool("do_sample", g.do_sample);
    g.temperature = o.get_double("temperature", g.temperature, 0.0, 1e6, true);
    g.top_k = o.get_int("top_k", g.top_k, 0, int64_t(1) << 31);
    if (auto s = o.get_optional_int("seed", 0, INT64_MAX)) g.seed = static_cast<uint64_t>(*s);
    g.eos_token_id = o.get_optional_int("eos_token_id", 0, int64_t(1) << 31);
    g.use_cache = o.get_bool("use_cache", g.use_cache);
    o.finish();
    return g;
}

} // namespace accel::config
