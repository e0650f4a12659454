#include "config/json.hpp"

#include "common/error.hpp"

#include <cjson/cJSON.h>

#include <cmath>
#include <cstring>

namespace accel::config {

namespace {
const char *type_name(const cJSON *v)
{
    if (v == nullptr) return "nothing";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

std::string fmt_double(double v)
{
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

bool is_integer(const cJSON *v, int64_t min, int64_t max, int64_t *out)
{
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!std::isfinite(d) || std::floor(d) != d) return false;
    // 2^63 is not representable as int64_t: compare as doubles first.
    if (d < static_cast<double>(min) || d > static_cast<double>(max) || std::fabs(d) > 9007199254740992.0)
        return false;
    *out = static_cast<int64_t>(d);
    return *out >= min && *out <= max;
}

std::string range_text(int64_t min, int64_t max)
{
    if (max == INT64_MAX) return "an integer >= " + std::to_string(min);
    return "an integer in " + std::to_string(min) + ".." + std::to_string(max);
}
} // namespace

std::string describe(const cJSON *value)
{
    if (value == nullptr) return "nothing";
    char *text = cJSON_PrintUnformatted(value);
    if (text == nullptr) return type_name(value);
    std::string s(text);
    cJSON_free(text);
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
}

void type_error(const std::string &path, const std::string &expected, const cJSON *got)
{
    fail(ACCEL_ERR_INVALID_ARGUMENT, path + ": expected " + expected + ", got " + describe(got));
}

JsonDocument::JsonDocument(const char *text, const std::string &what)
{
    if (text == nullptr) fail(ACCEL_ERR_INVALID_ARGUMENT, what + ": must not be NULL");
    size_t len = std::strlen(text);
    const char *end = nullptr;
    // The length includes the terminating NUL: with require_null_terminated cJSON looks for it.
    root_ = cJSON_ParseWithLengthOpts(text, len + 1, &end, true);
    if (root_ == nullptr) {
        size_t pos = end != nullptr && end >= text ? static_cast<size_t>(end - text) : 0;
        std::string near(text + std::min(pos, len), std::min<size_t>(20, len - std::min(pos, len)));
        fail(ACCEL_ERR_INVALID_ARGUMENT,
             what + ": malformed JSON at byte " + std::to_string(pos) + (near.empty() ? " (unexpected end)" : " near '" + near + "'"));
    }
}

JsonDocument::~JsonDocument() { cJSON_Delete(root_); }

JsonObject::JsonObject(const cJSON *node, std::string path) : node_(node), path_(std::move(path))
{
    if (!cJSON_IsObject(node_)) type_error(path_.empty() ? "(root)" : path_, "a JSON object", node_);
}

std::string JsonObject::path_of(const char *key) const { return path_.empty() ? key : path_ + "." + key; }

bool JsonObject::is_string(const char *key) const
{
    return cJSON_IsString(cJSON_GetObjectItemCaseSensitive(node_, key));
}

bool JsonObject::has(const char *key) const
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node_, key);
    return v != nullptr && !cJSON_IsNull(v);
}

const cJSON *JsonObject::item(const char *key)
{
    used_.insert(key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(node_, key);
    return cJSON_IsNull(v) ? nullptr : v;
}

bool JsonObject::get_bool(const char *key, bool def)
{
    const cJSON *v = item(key);
    if (v == nullptr) return def;
    if (!cJSON_IsBool(v)) type_error(path_of(key), "true or false", v);
    return cJSON_IsTrue(v);
}

int64_t JsonObject::get_int(const char *key, int64_t def, int64_t min, int64_t max)
{
    auto v = get_optional_int(key, min, max);
    return v ? *v : def;
}

std::optional<int64_t> JsonObject::get_optional_int(const char *key, int64_t min, int64_t max)
{
    const cJSON *v = item(key);
    if (v == nullptr) return std::nullopt;
    int64_t out = 0;
    if (!is_integer(v, min, max, &out)) type_error(path_of(key), range_text(min, max), v);
    return out;
}

double JsonObject::get_double(const char *key, double def, double min, double max, bool min_exclusive,
                              bool max_exclusive)
{
    const cJSON *v = item(key);
    if (v == nullptr) return def;
    if (!cJSON_IsNumber(v)) type_error(path_of(key), "a number", v);
    double d = v->valuedouble;
    bool ok = std::isfinite(d) && (min_exclusive ? d > min : d >= min) && (max_exclusive ? d < max : d <= max);
    if (!ok) {
        std::string range = std::string("a number ") + (min_exclusive ? "> " : ">= ") + fmt_double(min);
        if (std::isfinite(max)) range += (max_exclusive ? " and < " : " and <= ") + fmt_double(max);
        type_error(path_of(key), range, v);
    }
    return d;
}

std::optional<std::string> JsonObject::get_optional_string(const char *key)
{
    const cJSON *v = item(key);
    if (v == nullptr) return std::nullopt;
    if (!cJSON_IsString(v)) type_error(path_of(key), "a string", v);
    return std::string(v->valuestring);
}

std::string JsonObject::get_string(const char *key, const std::string &def)
{
    auto v = get_optional_string(key);
    return v ? *v : def;
}

std::string JsonObject::get_enum(const char *key, const std::string &def, std::initializer_list<const char *> allowed)
{
    const cJSON *v = item(key);
    if (v == nullptr) return def;
    std::string options;
    for (const char *a : allowed) {
        if (cJSON_IsString(v) && std::strcmp(v->valuestring, a) == 0) return a;
        options += (options.empty() ? "one of \"" : ", \"") + std::string(a) + "\"";
    }
    type_error(path_of(key), options, v);
}

std::vector<int64_t> JsonObject::get_int_array(const char *key, int64_t min, int64_t max)
{
    const cJSON *v = item(key);
    std::vector<int64_t> out;
    if (v == nullptr) return out;
    if (!cJSON_IsArray(v)) type_error(path_of(key), "an array of integers", v);
    int i = 0;
    for (const cJSON *e = v->child; e != nullptr; e = e->next, ++i) {
        int64_t x = 0;
        if (!is_integer(e, min, max, &x))
            type_error(path_of(key) + "[" + std::to_string(i) + "]", range_text(min, max), e);
        out.push_back(x);
    }
    return out;
}

std::vector<double> JsonObject::get_double_array(const char *key, double min, double max)
{
    const cJSON *v = item(key);
    std::vector<double> out;
    if (v == nullptr) return out;
    if (!cJSON_IsArray(v)) type_error(path_of(key), "an array of numbers", v);
    int i = 0;
    for (const cJSON *e = v->child; e != nullptr; e = e->next, ++i) {
        if (!cJSON_IsNumber(e) || !std::isfinite(e->valuedouble) || e->valuedouble < min || e->valuedouble > max)
            type_error(path_of(key) + "[" + std::to_string(i) + "]",
                       "a number in [" + fmt_double(min) + ", " + fmt_double(max) + "]", e);
        out.push_back(e->valuedouble);
    }
    return out;
}

std::vector<std::string> JsonObject::get_string_array(const char *key, const std::vector<std::string> &def)
{
    const cJSON *v = item(key);
    if (v == nullptr) return def;
    if (!cJSON_IsArray(v)) type_error(path_of(key), "an array of strings", v);
    std::vector<std::string> out;
    int i = 0;
    for (const cJSON *e = v->child; e != nullptr; e = e->next, ++i) {
        if (!cJSON_IsString(e)) type_error(path_of(key) + "[" + std::to_string(i) + "]", "a string", e);
        out.emplace_back(e->valuestring);
    }
    return out;
}

std::vector<std::string> JsonObject::get_string_or_array(const char *key, const std::vector<std::string> &def)
{
    const cJSON *v = item(key);
    if (v == nullptr) return def;
    if (cJSON_IsString(v)) return {v->valuestring};
    if (!cJSON_IsArray(v)) type_error(path_of(key), "a string or an array of strings", v);
    return get_string_array(key, def);
}

std::vector<bool> JsonObject::get_bool_array(const char *key, const std::vector<bool> &def, size_t size)
{
    const cJSON *v = item(key);
    if (v == nullptr) return def;
    const std::string expected = "an array of " + std::to_string(size) + " booleans";
    if (!cJSON_IsArray(v) || static_cast<size_t>(cJSON_GetArraySize(v)) != size) type_error(path_of(key), expected, v);
    std::vector<bool> out;
    int i = 0;
    for (const cJSON *e = v->child; e != nullptr; e = e->next, ++i) {
        if (!cJSON_IsBool(e)) type_error(path_of(key) + "[" + std::to_string(i) + "]", "true or false", e);
        out.push_back(cJSON_IsTrue(e));
    }
    return out;
}

std::optional<JsonObject> JsonObject::get_object(const char *key)
{
    const cJSON *v = item(key);
    if (v == nullptr) return std::nullopt;
    return JsonObject(v, path_of(key));
}

std::vector<JsonObject> JsonObject::get_object_array(const char *key)
{
    const cJSON *v = item(key);
    std::vector<JsonObject> out;
    if (v == nullptr) return out;
    if (!cJSON_IsArray(v)) type_error(path_of(key), "an array of objects", v);
    int i = 0;
    for (const cJSON *e = v->child; e != nullptr; e = e->next, ++i)
        out.emplace_back(e, path_of(key) + "[" + std::to_string(i) + "]");
    return out;
}

void JsonObject::require_absent(const char *key, const std::string &why)
{
    const cJSON *v = item(key);
    if (v != nullptr)
        fail(ACCEL_ERR_UNIMPLEMENTED, path_of(key) + ": " + why + " (got " + describe(v) + "; only null is accepted)");
}

void JsonObject::finish() const
{
    std::set<std::string> seen;
    for (const cJSON *e = node_->child; e != nullptr; e = e->next) {
        std::string k = e->string ? e->string : "";
        if (!seen.insert(k).second)
            fail(ACCEL_ERR_INVALID_ARGUMENT, path_of(k.c_str()) + ": duplicate key");
        if (used_.count(k) == 0) {
            std::string known;
            for (const auto &u : used_) known += (known.empty() ? "" : ", ") + u;
            fail(ACCEL_ERR_INVALID_ARGUMENT, path_of(k.c_str()) + ": unknown key (known keys: " + known + ")");
        }
    }
}

JsonWriter::JsonWriter() : root_(cJSON_CreateObject())
{
    if (root_ == nullptr) throw std::bad_alloc();
    stack_.push_back(root_);
}

JsonWriter::~JsonWriter() { cJSON_Delete(root_); }

JsonWriter &JsonWriter::begin_object(const char *key)
{
    cJSON *o = cJSON_AddObjectToObject(stack_.back(), key);
    if (o == nullptr) throw std::bad_alloc();
    stack_.push_back(o);
    return *this;
}

JsonWriter &JsonWriter::end_object()
{
    if (stack_.size() > 1) stack_.pop_back();
    return *this;
}

JsonWriter &JsonWriter::add(const char *key, bool v)
{
    cJSON_AddBoolToObject(stack_.back(), key, v);
    return *this;
}
JsonWriter &JsonWriter::add(const char *key, int64_t v)
{
    cJSON_AddNumberToObject(stack_.back(), key, static_cast<double>(v));
    return *this;
}
JsonWriter &JsonWriter::add(const char *key, double v)
{
    cJSON_AddNumberToObject(stack_.back(), key, v);
    return *this;
}
JsonWriter &JsonWriter::add(const char *key, const std::string &v)
{
    cJSON_AddStringToObject(stack_.back(), key, v.c_str());
    return *this;
}
JsonWriter &JsonWriter::add(const char *key, const char *v) { return add(key, std::string(v)); }
JsonWriter &JsonWriter::add_null(const char *key)
{
    cJSON_AddNullToObject(stack_.back(), key);
    return *this;
}
JsonWriter &JsonWriter::add(const char *key, const std::vector<std::string> &v)
{
    cJSON *arr = cJSON_AddArrayToObject(stack_.back(), key);
    for (const auto &s : v) cJSON_AddItemToArray(arr, cJSON_CreateString(s.c_str()));
    return *this;
}

JsonWriter &JsonWriter::add_bools(const char *key, const std::vector<bool> &v)
{
    cJSON *arr = cJSON_AddArrayToObject(stack_.back(), key);
    for (bool b : v) cJSON_AddItemToArray(arr, cJSON_CreateBool(b));
    return *this;
}

std::string JsonWriter::str() const
{
    char *text = cJSON_PrintUnformatted(root_);
    if (text == nullptr) throw std::bad_alloc();
    std::string s(text);
    cJSON_free(text);
    return s;
}

} // namespace accel::config
