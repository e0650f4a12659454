#include "config/dataloader_options.hpp"

#include "config/json.hpp"

namespace accel::config {

DataLoaderOptions parse_dataloader_options(const char *json)
{
    JsonDocument doc(json == nullptr ? "{}" : json, "config_json");
    JsonObject o(doc.root(), "");
    DataLoaderOptions d;
    d.batch_size = o.get_int("batch_size", 1, 1, INT32_MAX);
    d.shuffle = o.get_bool("shuffle", false);
    if (auto s = o.get_optional_int("seed", 0, INT64_MAX)) d.seed = static_cast<uint64_t>(*s);
    d.drop_last = o.get_bool("drop_last", false);
    o.finish();
    return d;
}

} // namespace accel::config
