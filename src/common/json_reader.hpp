// A small strict JSON reader for checkpoint *file formats* (safetensors headers, shard index files).
// Configuration JSON goes through src/config/ (cJSON); this reader exists because file headers are
// untrusted input with needs cJSON does not meet: duplicate keys must be rejected, integers up to
// 2^64-1 must be exact, and nesting depth and sizes are capped. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace accel {

struct JsonValue {
    enum class Kind { Null, Bool, Number, String, Array, Object };
    Kind kind = Kind::Null;
    bool boolean = false;
    std::string text;                 // String: the decoded UTF-8; Number: the literal
    bool is_uint = false;             // Number that is a non-negative integer fitting uint64
    uint64_t uint_value = 0;
    std::vector<JsonValue> items;     // Array
    std::vector<std::pair<std::string, JsonValue>> members; // Object, in document order

    const JsonValue *find(const std::string &key) const;
};

// Parses `text`; JSON whitespace around the value is allowed. Throws accel::Error(DATA_LOSS) with
// "<what>: ..." and the byte offset on any syntax error or duplicate key.
JsonValue parse_json(const char *text, size_t len, const std::string &what);

// Quotes and escapes `s` as a JSON string (UTF-8 passes through; control characters are \u escaped).
std::string json_quote(const std::string &s);

} // namespace accel
