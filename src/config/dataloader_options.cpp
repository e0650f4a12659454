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
    if (auto p = o.get_object("packing")) {
        if (!iterable)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "packing: needs an iterable dataset (a stream of documents); a map-style "
                                             "dataset's samples are indexed one by one, not concatenated");
        if (c.collate.kind != CollateOptions::Kind::Stack)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "packing: windows all have block_size tokens, so they are stacked: "
                                             "\"collate\": \"pad\" does not apply");
        if (!p->has("block_size")) fail(ACCEL_ERR_INVALID_ARGUMENT, "packing.block_size: required (tokens per window)");
        c.packing.block_size = p->get_int("block_size", 0, 1, INT32_MAX);
        c.packing.eos_token_id = p->get_optional_int("eos_token_id", INT64_MIN, INT64_MAX);
        p->finish();
    }
    o.finish();
    return c;
}

FileDataLoaderOptions parse_file_dataloader_options(const char *json)
{
    JsonDocument doc(json == nullptr ? "{}" : json, "config_json");
    JsonObject o(doc.root(), "");
    FileDataLoaderOptions f;
    f.loader = read_loader_keys(o);
    if (!o.has("format")) fail(ACCEL_ERR_INVALID_ARGUMENT, "format: required (\"tokens\", \"npy\" or \"safetensors\")");
    const std::string format = o.get_enum("format", "tokens", {"tokens", "npy", "safetensors"});
    f.format = format == "npy" ? FileDataLoaderOptions::Format::Npy
               : format == "safetensors" ? FileDataLoaderOptions::Format::Safetensors
                                         : FileDataLoaderOptions::Format::Tokens;
    f.files = o.get_string_or_array("files", {});
    f.dtype = o.get_string("dtype", "");
    f.features = o.get_string("features", "");
    f.labels = o.get_string("labels", "");
    const bool st = f.format == FileDataLoaderOptions::Format::Safetensors;
    if (st) {
        f.tensor = o.get_string("tensor", "");
        f.file = o.get_string("file", "");
    }
    if (f.format == FileDataLoaderOptions::Format::Tokens && f.dtype.empty())
        fail(ACCEL_ERR_INVALID_ARGUMENT, "dtype: required for raw token files (\"uint8\", \"uint16\", \"int32\" or \"int64\")");
    if (f.samples()) {
        if (f.format == FileDataLoaderOptions::Format::Tokens)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "features: raw token files are one stream (use \"files\"); sample tensors come "
                                             "from \"npy\" or \"safetensors\" files");
        if (!f.files.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "files: give either \"files\" (a token stream) or \"features\" (samples)");
        if (st && f.file.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "file: required (the safetensors file holding \"features\")");
        for (const char *key : {"block_size", "stride", "eos_token_id", "pad_token_id", "label_pad_token_id"})
            if (o.has(key)) fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(key) + ": only for token streams (\"files\")");
    } else {
        if (f.files.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "files: required (token files or glob patterns), or \"features\"");
        if (!f.labels.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "labels: only with \"features\" (a token stream's labels are its next tokens)");
        if (st && f.tensor.empty()) fail(ACCEL_ERR_INVALID_ARGUMENT, "tensor: required (the token tensor of each safetensors file)");
        if (!o.has("block_size")) fail(ACCEL_ERR_INVALID_ARGUMENT, "block_size: required (tokens per input sequence)");
        f.block_size = o.get_int("block_size", 0, 1, INT32_MAX);
        f.stride = o.get_int("stride", f.block_size, 1, INT32_MAX);
        f.eos_token_id = o.get_optional_int("eos_token_id", INT64_MIN, INT64_MAX);
        if (!f.eos_token_id)
            for (const char *key : {"pad_token_id", "label_pad_token_id"})
                if (o.has(key))
                    fail(ACCEL_ERR_INVALID_ARGUMENT, std::string(key) + ": only with \"eos_token_id\" (windows are padded "
                                                                        "only where a document ends)");
        f.pad_token_id = o.get_int("pad_token_id", 0, INT64_MIN, INT64_MAX);
        f.label_pad_token_id = o.get_int("label_pad_token_id", -100, INT64_MIN, INT64_MAX);
    }
    o.finish();
    return f;
}

} // namespace accel::config
