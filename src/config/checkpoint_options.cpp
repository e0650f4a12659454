#include "config/checkpoint_options.hpp"

#include "common/error.hpp"
#include "config/device_map.hpp" // convert_file_size_to_int
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <cctype>
#include <cmath>
#include <cstdlib>

namespace accel::config {

uint64_t parse_size_text(const std::string &text, const std::string &where)
{
    std::string s = text;
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.erase(s.begin());
    auto bad = [&]() -> uint64_t {
        fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected a size such as \"5GB\", \"200MB\" or a number of bytes, "
                                                 "got \"" + text + "\"");
    };
    std::string upper = s;
    for (char &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    // Binary units ("1.5GiB", "512MiB", "64KiB") as Accelerate's convert_file_size_to_int reads them.
    if (upper.size() > 3 && upper.compare(upper.size() - 2, 2, "IB") == 0)
        return static_cast<uint64_t>(convert_file_size_to_int(s, where));
    if (s.size() < 3) {
        // A bare number of bytes.
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return bad();
        return std::strtoull(s.c_str(), nullptr, 10);
    }
    std::string unit = s.substr(s.size() - 2);
    for (char &c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    double mult = unit == "TB" ? 1e12 : unit == "GB" ? 1e9 : unit == "MB" ? 1e6 : unit == "KB" ? 1e3 : 0;
    std::string number = mult > 0 ? s.substr(0, s.size() - 2) : s;
    if (mult == 0) mult = 1;
    if (number.empty() || number.find_first_not_of("0123456789.") != std::string::npos) return bad();
    char *end = nullptr;
    double v = std::strtod(number.c_str(), &end);
    if (end == number.c_str() || *end != '\0' || !(v > 0) || v * mult >= 1.8e19) return bad();
    uint64_t bytes = static_cast<uint64_t>(v * mult); // truncated, as int(float * unit)
    if (bytes == 0) return bad();
    return bytes;
}

namespace {
std::string map_location(JsonObject &o)
{
    if (!o.has("map_location")) {
        o.get_optional_string("map_location"); // marks null as used
        return "cpu";
    }
    auto v = o.get_optional_string("map_location");
    if (*v != "cpu" && *v != "on_device")
        fail(ACCEL_ERR_INVALID_ARGUMENT, o.path_of("map_location") + ": expected null, \"cpu\" or \"on_device\", got \"" +
                                             *v + "\"");
    return *v;
}
} // namespace

SaveStateOptions parse_save_state_options(const char *json, const char *what)
{
    SaveStateOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.safe_serialization = root.get_bool("safe_serialization", true);
    o.async_save = root.get_bool("async", false);
    root.finish();
    return o;
}

LoadStateOptions parse_load_state_options(const char *json, const char *what)
{
    LoadStateOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.strict = root.get_bool("strict", true);
    o.map_location = map_location(root);
    root.finish();
    return o;
}

MergeWeightsOptions parse_merge_weights_options(const char *json, const char *what)
{
    MergeWeightsOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.safe_serialization = root.get_bool("safe_serialization", true);
    o.remove_checkpoint_dir = root.get_bool("remove_checkpoint_dir", false);
    root.finish();
    return o;
}

SaveModelOptions parse_save_model_options(const char *json, const char *what)
{
    SaveModelOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.safe_serialization = root.get_bool("safe_serialization", true);
    if (root.has("max_shard_size")) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc.root(), "max_shard_size");
        if (cJSON_IsString(v)) o.max_shard_size = parse_size_text(root.get_string("max_shard_size", ""), root.path_of("max_shard_size"));
        else o.max_shard_size = static_cast<uint64_t>(root.get_int("max_shard_size", 0, 1, INT64_MAX));
    } else {
        root.get_optional_string("max_shard_size");
    }
    root.finish();
    return o;
}

GetStateDictOptions parse_get_state_dict_options(const char *json, const char *what)
{
    GetStateDictOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.unwrap = root.get_bool("unwrap", true);
    if (root.has("rank0_only")) o.rank0_only = root.get_bool("rank0_only", false);
    else root.accept("rank0_only"); // null: the default
    root.finish();
    return o;
}

std::optional<accel_dtype_t> get_dtype(JsonObject &root, const char *key)
{
    auto d = root.get_optional_string(key);
    if (!d) return std::nullopt;
    std::string v = d->rfind("torch.", 0) == 0 ? d->substr(6) : *d;
    if (v == "float32" || v == "float") return ACCEL_DTYPE_FLOAT32;
    if (v == "float64" || v == "double") return ACCEL_DTYPE_FLOAT64;
    if (v == "float16" || v == "half") return ACCEL_DTYPE_FLOAT16;
    if (v == "bfloat16") return ACCEL_DTYPE_BFLOAT16;
    fail(ACCEL_ERR_INVALID_ARGUMENT, root.path_of(key) + ": expected \"float32\", \"float64\", \"float16\" or "
                                                         "\"bfloat16\", got \"" + *d + "\"");
}

LoadCheckpointOptions parse_load_checkpoint_options(const char *json, const char *what)
{
    LoadCheckpointOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.strict = root.get_bool("strict", false);
    o.dtype = get_dtype(root, "dtype");
    root.finish();
    return o;
}

} // namespace accel::config
