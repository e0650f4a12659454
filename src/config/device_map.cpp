#include "config/device_map.hpp"

#include "common/error.hpp"
#include "config/json.hpp"

#include <cjson/cJSON.h>

#include <cmath>
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

} // namespace accel::config
