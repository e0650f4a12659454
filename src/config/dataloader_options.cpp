#include "config/dataloader_options.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

namespace accel::config {

namespace {
DataLoaderOptions read_loader_keys(JsonObject &o)
{
    DataLoaderOptions d;
    d.batch_size = o.get_int("batch_size", 1, 1, INT32_MAX);
    d.shuffle = o.get_bool("shuffle", false);
    if (auto s = o.get_optional_int("seed", 0, INT64_MAX)) d.seed = static_cast<uint64_t>(*s);
    d.drop_last = o.get_bool("drop_last", false);
    return d;
}
} // namespace

DataLoaderOptions parse_dataloader_options(const char *json)
{
    JsonDocument doc(json == nullptr ? "{}" : json, "config_json");
    JsonObject o(doc.root(), "");
    DataLoaderOptions d = read_loader_keys(o);
    o.finish();
    return d;
}

TokenDataLoaderOptions parse_token_dataloader_options(const char *json)
{
    JsonDocument doc(json == nullptr ? "{}" : json, "config_json");
    JsonObject o(doc.root(), "");
    TokenDataLoaderOptions t;
    t.loader = read_loader_keys(o);
    if (!o.has("block_size")) fail(ACCEL_ERR_INVALID_ARGUMENT, "block_size: required (tokens per input sequence)");
    t.block_size = o.get_int("block_size", 0, 1, INT32_MAX);
    t.stride = o.get_int("stride", t.block_size, 1, INT32_MAX);
    o.finish();
    return t;
}

} // namespace accel::config
