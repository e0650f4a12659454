#include "config/device_map.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>

namespace accel::config {

std::string DeviceTarget::str() const
{
    switch (kind) {
    case Kind::gpu: return std::to_string(index);
    case Kind::cpu: return "cpu";
    case Kind::disk: return "disk";
    }
    return "?";
}

namespace {

// A GPU index in text: "cuda" (torch.device("cuda") is device 0) or "cuda:N".
bool parse_cuda(const std::string &s, int32_t &index)
{
    if (s == "cuda") {
        index = 0;
        return true;
    }
    if (s.rfind("cuda:", 0) != 0 || s.size() == 5 || s.size() > 14) return false;
    int64_t v = 0;
    for (size_t i = 5; i < s.size(); ++i) {
        if (s[i] < '0' || s[i] > '9') return false;
        v = v * 10 + (s[i] - '0');
    }
    if (v > INT32_MAX) return false;
    index = static_cast<int32_t>(v);
    return true;
}

DeviceTarget parse_target(const cJSON *v, const std::string &where)
{
    const char *expected = "a GPU index (0, 1, ...), \"cpu\", \"disk\" or \"cuda:N\"";
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!(d >= 0) || d > INT32_MAX || std::floor(d) != d) type_error(where, expected, v);
        return DeviceTarget::gpu(static_cast<int32_t>(d));
    }
    if (!cJSON_IsString(v)) type_error(where, expected, v);
    std::string s = v->valuestring;
    if (s == "cpu") return DeviceTarget::cpu();
    if (s == "disk") return DeviceTarget::disk();
    int32_t index = 0;
    if (parse_cuda(s, index)) return DeviceTarget::gpu(index);
    type_error(where, expected, v);
}

} // namespace

DeviceMap parse_device_map(const char *json, const std::string &what)
{
    JsonDocument doc(json, what);
    const cJSON *root = doc.root();
    if (!cJSON_IsObject(root)) type_error(what, "an object of module name -> device", root);
    DeviceMap map;
    std::set<std::string> seen;
    for (const cJSON *e = root->child; e != nullptr; e = e->next) {
        std::string name = e->string ? e->string : "";
        std::string where = what + "[\"" + name + "\"]";
        if (!seen.insert(name).second) fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": duplicate module name");
        map.emplace_back(name, parse_target(e, where));
    }
    return map;
}

std::string device_map_to_json(const DeviceMap &map)
{
    cJSON *root = cJSON_CreateObject();
    for (const auto &[name, target] : map) {
        cJSON *v = target.kind == DeviceTarget::Kind::gpu ? cJSON_CreateNumber(target.index)
                                                           : cJSON_CreateString(target.str().c_str());
        cJSON_AddItemToObject(root, name.c_str(), v);
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (text == nullptr) fail(ACCEL_ERR_RESOURCE_EXHAUSTED, "device_map: out of memory writing JSON");
    std::string s(text);
    cJSON_free(text);
    return s;
}

int64_t convert_file_size_to_int(const std::string &size, const std::string &where)
{
    const std::string bad = where + ": \"" + size +
                            "\" is not in a valid format; use an integer for bytes, or a string with a unit (like \"5.0GB\")";
    std::string upper = size;
    for (char &c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    struct Unit {
        const char *suffix;
        double factor;
        bool bits_if_lower_b; // "Gb": bits
    };
    static const Unit units[] = {{"GIB", 1073741824.0, false}, {"MIB", 1048576.0, false}, {"KIB", 1024.0, false},
                                 {"GB", 1e9, true},            {"MB", 1e6, true},          {"KB", 1e3, true}};
    for (const Unit &u : units) {
        const size_t n = std::strlen(u.suffix);
        if (upper.size() < n || upper.compare(upper.size() - n, n, u.suffix) != 0) continue;
        const std::string number = size.substr(0, size.size() - n);
        // Python's float(): optional blanks and sign, digits with an optional point and exponent.
        char *end = nullptr;
        const double v = number.empty() ? 0.0 : std::strtod(number.c_str(), &end);
        if (number.empty() || end == number.c_str() || *end != '\0' || !std::isfinite(v) || v * u.factor >= 9.2e18)
            fail(ACCEL_ERR_INVALID_ARGUMENT, bad);
        int64_t bytes = static_cast<int64_t>(v * u.factor); // int(float(...) * unit): truncated
        if (u.bits_if_lower_b && size.back() == 'b') bytes /= 8;
        if (bytes <= 0) fail(ACCEL_ERR_INVALID_ARGUMENT, bad);
        return bytes;
    }
    fail(ACCEL_ERR_INVALID_ARGUMENT, bad); // Accelerate: no unit gives 0, refused as not > 0
}

namespace {

// get_max_memory's keys: GPU indexes as JSON object keys ("0"), "cpu", "disk".
DeviceTarget max_memory_key(const std::string &key, const std::string &where)
{
    if (key == "cpu") return DeviceTarget::cpu();
    if (key == "disk") return DeviceTarget::disk();
    if (!key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos)
        return DeviceTarget::gpu(static_cast<int32_t>(std::stol(key)));
    if (key == "mps")
        fail(ACCEL_ERR_UNIMPLEMENTED, where + ": accel has no mps device");
    fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": device \"" + key +
                                         "\" is not recognized; devices are GPU indexes (\"0\", \"1\", ...), \"cpu\" and \"disk\"");
}

MaxMemory parse_max_memory(const cJSON *node, const std::string &path)
{
    if (!cJSON_IsObject(node)) type_error(path, "an object of device -> bytes or size text", node);
    MaxMemory out;
    std::set<std::string> seen;
    for (const cJSON *e = node->child; e != nullptr; e = e->next) {
        const std::string key = e->string ? e->string : "";
        const std::string where = path + "[\"" + key + "\"]";
        if (!seen.insert(key).second) fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": duplicate device");
        const DeviceTarget d = max_memory_key(key, where);
        int64_t bytes = 0;
        if (cJSON_IsString(e)) {
            bytes = convert_file_size_to_int(e->valuestring, where);
        } else if (cJSON_IsNumber(e) && e->valuedouble >= 0 && e->valuedouble < 9.2e18 &&
                   std::floor(e->valuedouble) == e->valuedouble) {
            bytes = static_cast<int64_t>(e->valuedouble);
        } else {
            type_error(where, "a number of bytes >= 0 or a size such as \"10GiB\"", e);
        }
        for (const auto &[other, b] : out)
            if (other == d) fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": device given twice");
        out.emplace_back(d, bytes);
    }
    // GPUs first by index, then the CPU, then the disk.
    auto rank = [](const DeviceTarget &t) {
        return t.kind == DeviceTarget::Kind::gpu ? int64_t{t.index} : t.kind == DeviceTarget::Kind::cpu ? int64_t{1} << 40 : int64_t{1} << 41;
    };
    std::stable_sort(out.begin(), out.end(), [&](const auto &a, const auto &b) { return rank(a.first) < rank(b.first); });
    return out;
}

// _get_proper_dtype + dtype_byte_size: "float16" or "torch.float16" -> bits of one element.
int32_t dtype_bits(const std::string &text, const std::string &where)
{
    std::string name = text.rfind("torch.", 0) == 0 ? text.substr(6) : text;
    static const std::pair<const char *, int32_t> known[] = {
        {"float64", 64}, {"double", 64}, {"float32", 32}, {"float", 32},  {"float16", 16}, {"half", 16},
        {"bfloat16", 16}, {"int64", 64}, {"long", 64},    {"int32", 32},  {"int", 32},     {"int16", 16},
        {"short", 16},   {"int8", 8},    {"uint8", 8},    {"bool", 1}};
    for (const auto &[n, bits] : known)
        if (name == n) return bits;
    fail(ACCEL_ERR_INVALID_ARGUMENT, where + ": expected a torch dtype such as \"float16\", \"bfloat16\", \"float32\" "
                                             "or \"int8\", got \"" + text + "\"");
}

} // namespace

InferDeviceMapOptions parse_infer_device_map_options(const char *json, const std::string &what)
{
    InferDeviceMapOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    if (const cJSON *m = root.get_raw("max_memory")) o.max_memory = parse_max_memory(m, root.path_of("max_memory"));
    o.no_split_module_classes = root.get_string_or_array("no_split_module_classes", {});
    if (auto d = root.get_optional_string("dtype")) o.dtype_bits = dtype_bits(*d, root.path_of("dtype"));
    o.balanced = root.get_bool("balanced", false);
    o.low_zero = root.get_bool("low_zero", false);
    if (o.low_zero && !o.balanced)
        fail(ACCEL_ERR_INVALID_ARGUMENT, root.path_of("low_zero") + ": only with \"balanced\": true (it is "
                                                                     "get_balanced_memory's argument)");
    root.finish();
    return o;
}

ModuleSizesOptions parse_module_sizes_options(const char *json, const std::string &what)
{
    ModuleSizesOptions o;
    JsonDocument doc(json == nullptr ? "{}" : json, what);
    JsonObject root(doc.root(), what);
    o.no_split_module_classes = root.get_string_or_array("no_split_module_classes", {});
    if (auto d = root.get_optional_string("dtype")) o.dtype_bits = dtype_bits(*d, root.path_of("dtype"));
    root.finish();
    return o;
}

std::string module_sizes_to_json(const std::vector<std::pair<std::string, int64_t>> &sizes, int64_t max_layer_size,
                                 const std::vector<std::string> &max_layer_names)
{
    JsonWriter w;
    w.begin_object("sizes");
    for (const auto &[name, bytes] : sizes) w.add(name.c_str(), bytes);
    w.end_object();
    w.add("max_layer_size", max_layer_size);
    w.add("max_layer_names", max_layer_names);
    return w.str();
}

std::string max_memory_to_json(const MaxMemory &m)
{
    JsonWriter w;
    for (const auto &[d, bytes] : m) w.add(d.str().c_str(), bytes);
    return w.str();
}

} // namespace accel::config
