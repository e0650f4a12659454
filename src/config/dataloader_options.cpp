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
    d.num_workers = o.get_int("num_workers", 0, 0, 256);
    d.prefetch_factor = o.get_int("prefetch_factor", 2, 1, 1024);
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

CallbackDataLoaderOptions parse_callback_dataloader_options(const char *json, bool iterable)
{
    JsonDocument doc(json == nullptr ? "{}" : json, "config_json");
    JsonObject o(doc.root(), "");
    CallbackDataLoaderOptions c;
    if (iterable)
        for (const char *key : {"shuffle", "seed"})
            if (o.has(key))
                fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(key) + ": an iterable dataset has no sampler to shuffle; "
                                                                    "shuffle in the dataset (e.g. per epoch in its set_epoch)");
    c.loader = read_loader_keys(o);
    const std::string kind = o.get_string("collate", "stack");
    if (kind == "pad") c.collate.kind = CollateOptions::Kind::Pad;
    else if (kind != "stack")
        fail(ACCEL_ERR_INVALID_ARGUMENT, "collate: expected \"stack\" or \"pad\" (or pass a collate callback), got \"" + kind + "\"");
    c.collate.pad_token_id = o.get_int("pad_token_id", 0, INT64_MIN, INT64_MAX);
    c.collate.label_pad_token_id = o.get_int("label_pad_token_id", -100, INT64_MIN, INT64_MAX);
    c.collate.causal_lm = o.get_bool("causal_lm", false);
    o.finish();
    return c;
}

} // namespace accel::config
