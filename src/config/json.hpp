// A strict reader over cJSON: every lookup names its JSON path, finish() rejects unknown keys.
// Only src/config/ includes this file; the rest of the library sees typed config structs.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

struct cJSON;

namespace accel::config {

// Owns a parsed document. `what` names the argument in messages ("config_json").
class JsonDocument {
public:
    JsonDocument(const char *text, const std::string &what);
    ~JsonDocument();
    JsonDocument(const JsonDocument &) = delete;
    JsonDocument &operator=(const JsonDocument &) = delete;
    const cJSON *root() const { return root_; }

private:
    cJSON *root_ = nullptr;
};

// A JSON object at `path`. Lookups mark keys as used; finish() fails on any key never looked up.
class JsonObject {
public:
    JsonObject(const cJSON *node, std::string path);

    const std::string &path() const { return path_; }
    std::string path_of(const char *key) const;
    bool has(const char *key) const; // present and not null
    bool is_string(const char *key) const; // present and a string (values that may be "auto" or a number)
    const cJSON *node() const { return node_; }

    bool get_bool(const char *key, bool def);
    int64_t get_int(const char *key, int64_t def, int64_t min, int64_t max);
    std::optional<int64_t> get_optional_int(const char *key, int64_t min, int64_t max);
    double get_double(const char *key, double def, double min, double max, bool min_exclusive = false,
                      bool max_exclusive = false);
    std::string get_string(const char *key, const std::string &def);
    std::optional<std::string> get_optional_string(const char *key);
    std::string get_enum(const char *key, const std::string &def, std::initializer_list<const char *> allowed);
    std::vector<int64_t> get_int_array(const char *key, int64_t min, int64_t max);
    std::vector<double> get_double_array(const char *key, double min, double max);
    std::vector<std::string> get_string_array(const char *key, const std::vector<std::string> &def);
    // One string or an array of strings (Accelerate's `str | list[str]` arguments, e.g. log_with).
    std::vector<std::string> get_string_or_array(const char *key, const std::vector<std::string> &def);
    // An array of exactly `size` booleans; `def` when absent or null.
    std::vector<bool> get_bool_array(const char *key, const std::vector<bool> &def, size_t size);
    // The object under `key`, or nullopt when absent or null.
    std::optional<JsonObject> get_object(const char *key);
    // Elements of the array under `key` as objects (error if not an array of objects).
    std::vector<JsonObject> get_object_array(const char *key);
    // The value under `key` of any type, unread (null when absent or null): for values handed on to another
    // parser as they are.
    const cJSON *get_raw(const char *key) { return item(key); }
    // Accepts the key with any value, unread: a key of a foreign format that changes nothing here (e.g. a
    // Hugging Face config.json's "eos_token_id", an integer or a list).
    void accept(const char *key) { item(key); }
    // The key must be absent or null: anything else is ACCEL_ERR_UNIMPLEMENTED (`why` says what is missing).
    void require_absent(const char *key, const std::string &why);
    // Fails with ACCEL_ERR_INVALID_ARGUMENT on the first key that no lookup used.
    void finish() const;

private:
    const cJSON *item(const char *key);
    const cJSON *node_;
    std::string path_;
    std::set<std::string> used_;
};

// `path: expected <expected>, got <value>` as ACCEL_ERR_INVALID_ARGUMENT.
[[noreturn]] void type_error(const std::string &path, const std::string &expected, const cJSON *got);
std::string describe(const cJSON *value);

// Builds the JSON text of an effective configuration.
class JsonWriter {
public:
    JsonWriter();
    ~JsonWriter();
    JsonWriter(const JsonWriter &) = delete;
    JsonWriter &operator=(const JsonWriter &) = delete;
    JsonWriter &begin_object(const char *key); // nested object under key (nullptr at root: no-op)
    JsonWriter &end_object();
    JsonWriter &add(const char *key, bool v);
    JsonWriter &add(const char *key, int64_t v);
    JsonWriter &add(const char *key, double v);
    JsonWriter &add(const char *key, const std::string &v);
    JsonWriter &add(const char *key, const char *v);
    JsonWriter &add_null(const char *key);
    JsonWriter &add(const char *key, const std::vector<std::string> &v);
    JsonWriter &add_bools(const char *key, const std::vector<bool> &v);
    std::string str() const;

private:
    cJSON *root_;
    std::vector<cJSON *> stack_;
};

} // namespace accel::config
