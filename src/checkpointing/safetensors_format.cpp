#include "checkpointing/safetensors_format.hpp"

#include "common/json_reader.hpp"
#include "common/error.hpp"

#include <algorithm>
#include <cstring>
#include <set>

namespace accel::ckpt {

namespace {
struct DtypeRow {
    StDtype dtype;
    const char *name;
    int bits;
};
constexpr DtypeRow kDtypes[] = {
    {StDtype::BOOL, "BOOL", 8},        {StDtype::F4, "F4", 4},
    {StDtype::F6_E2M3, "F6_E2M3", 6},  {StDtype::F6_E3M2, "F6_E3M2", 6},
    {StDtype::U8, "U8", 8},            {StDtype::I8, "I8", 8},
    {StDtype::F8_E5M2, "F8_E5M2", 8},  {StDtype::F8_E4M3, "F8_E4M3", 8},
    {StDtype::F8_E8M0, "F8_E8M0", 8},  {StDtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {StDtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {StDtype::I16, "I16", 16},         {StDtype::U16, "U16", 16},
    {StDtype::F16, "F16", 16},         {StDtype::BF16, "BF16", 16},
    {StDtype::I32, "I32", 32},         {StDtype::U32, "U32", 32},
    {StDtype::F32, "F32", 32},         {StDtype::C64, "C64", 64},
    {StDtype::F64, "F64", 64},         {StDtype::I64, "I64", 64},
    {StDtype::U64, "U64", 64},
};

std::string shape_text(const std::vector<uint64_t> &shape)
{
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
    return s + "]";
}

// numel x bits / 8 with overflow and whole-byte checks; nullopt when impossible.
std::optional<uint64_t> byte_size(const std::vector<uint64_t> &shape, int bits)
{
    unsigned __int128 n = 1;
    for (uint64_t d : shape) {
        n *= d;
        if (n > UINT64_MAX) return std::nullopt;
    }
    n *= static_cast<unsigned>(bits);
    if (n % 8 != 0 || n / 8 > UINT64_MAX) return std::nullopt;
    return static_cast<uint64_t>(n / 8);
}
} // namespace

const char *st_dtype_name(StDtype d) { return kDtypes[static_cast<int>(d)].name; }
int st_dtype_bits(StDtype d) { return kDtypes[static_cast<int>(d)].bits; }

std::optional<StDtype> st_dtype_from_name(const std::string &name)
{
    for (const auto &r : kDtypes)
        if (name == r.name) return r.dtype;
    return std::nullopt;
}

const StTensorInfo *StHeader::find(const std::string &name) const
{
    for (const auto &t : tensors)
        if (t.name == name) return &t;
    return nullptr;
}

uint64_t st_numel(const std::vector<uint64_t> &shape, const std::string &what)
{
    unsigned __int128 n = 1;
    for (uint64_t d : shape) {
        n *= d;
        if (n > UINT64_MAX) fail(ACCEL_ERR_DATA_LOSS, what + ": shape " + shape_text(shape) + " overflows");
    }
    return static_cast<uint64_t>(n);
}

StHeader parse_st_header(const uint8_t *file, uint64_t file_len, const std::string &what)
{
    auto bad = [&](const std::string &msg) { fail(ACCEL_ERR_DATA_LOSS, what + ": " + msg); };
    if (file_len < 8)
        bad("the file is " + std::to_string(file_len) + " bytes, shorter than the 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | file[i];
    if (n > kMaxHeaderBytes)
        bad("header length " + std::to_string(n) + " exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
    if (8 + n > file_len)
        bad("truncated: the header length is " + std::to_string(n) + " bytes but the file has only " +
            std::to_string(file_len - 8) + " bytes after the length field");
    StHeader h;
    h.header_len = n;
    JsonValue root = parse_json(reinterpret_cast<const char *>(file + 8), n, what + ": header");
    if (root.kind != JsonValue::Kind::Object) bad("the header is not a JSON object");
    const uint64_t buffer_len = file_len - 8 - n;
    for (const auto &[name, v] : root.members) {
        if (name == "__metadata__") {
            if (v.kind != JsonValue::Kind::Object) bad("__metadata__ is not an object of strings");
            h.has_metadata = true;
            for (const auto &[k, mv] : v.members) {
                if (mv.kind != JsonValue::Kind::String) bad("__metadata__[\"" + k + "\"] is not a string");
                h.metadata.emplace_back(k, mv.text);
            }
            continue;
        }
        // A named copy: C++17 forbids capturing a structured binding (clang < 16 rejects it).
        const std::string &tensor_name = name;
        auto tbad = [&](const std::string &msg) { bad("tensor \"" + tensor_name + "\": " + msg); };
        if (v.kind != JsonValue::Kind::Object) tbad("entry is not an object");
        const JsonValue *dt = v.find("dtype");
        const JsonValue *shape = v.find("shape");
        const JsonValue *offs = v.find("data_offsets");
        if (dt == nullptr || shape == nullptr || offs == nullptr) tbad("entry needs dtype, shape and data_offsets");
        if (dt->kind != JsonValue::Kind::String) tbad("dtype is not a string");
        auto dtype = st_dtype_from_name(dt->text);
        if (!dtype) tbad("unknown dtype \"" + dt->text + "\"");
        StTensorInfo t;
        t.name = name;
        t.dtype = *dtype;
        if (shape->kind != JsonValue::Kind::Array) tbad("shape is not an array");
        for (const auto &d : shape->items) {
            if (d.kind != JsonValue::Kind::Number || !d.is_uint) tbad("shape holds a value that is not an unsigned integer");
            t.shape.push_back(d.uint_value);
        }
        if (offs->kind != JsonValue::Kind::Array || offs->items.size() != 2 || !offs->items[0].is_uint ||
            !offs->items[1].is_uint)
            tbad("data_offsets is not a pair of unsigned integers");
        t.begin = offs->items[0].uint_value;
        t.end = offs->items[1].uint_value;
        const std::string offs_text = "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + "]";
        if (t.end < t.begin) tbad("data_offsets " + offs_text + " end before they begin");
        if (t.end > buffer_len)
            tbad("data_offsets " + offs_text + " are out of range: the data buffer has " +
                 std::to_string(buffer_len) + " bytes");
        auto size = byte_size(t.shape, st_dtype_bits(t.dtype));
        if (!size || *size != t.end - t.begin)
            tbad("shape " + shape_text(t.shape) + " x " + dt->text + " is " +
                 (size ? std::to_string(*size) + " bytes" : std::string("not a whole number of bytes")) +
                 " but data_offsets " + offs_text + " span " + std::to_string(t.end - t.begin) + " bytes");
        h.tensors.push_back(std::move(t));
    }
    // The tensors must tile the buffer exactly: no overlap, no hole, no trailing bytes.
    std::vector<const StTensorInfo *> order;
    for (const auto &t : h.tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const StTensorInfo *a, const StTensorInfo *b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
    });
    uint64_t pos = 0;
    const StTensorInfo *prev = nullptr;
    for (const auto *t : order) {
        const std::string offs_text = "[" + std::to_string(t->begin) + ", " + std::to_string(t->end) + "]";
        if (t->begin < pos)
            bad("tensor \"" + t->name + "\": data_offsets " + offs_text + " overlap tensor \"" + prev->name +
                "\" (which ends at " + std::to_string(pos) + ")");
        if (t->begin > pos)
            bad("tensor \"" + t->name + "\": data_offsets " + offs_text + " leave a hole (bytes " +
                std::to_string(pos) + ".." + std::to_string(t->begin) + " belong to no tensor)");
        pos = t->end;
        prev = t;
    }
    if (pos != buffer_len)
        bad("the data buffer has " + std::to_string(buffer_len) + " bytes but the tensors cover " +
            std::to_string(pos) + " (trailing bytes are not allowed)");
    return h;
}

std::string build_st_header(std::vector<StWriteEntry> &entries, const StringMap *metadata)
{
    std::set<std::string> names;
    for (const auto &e : entries) {
        if (!names.insert(e.name).second)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "safetensors: tensor name \"" + e.name + "\" appears twice");
        auto size = byte_size(e.shape, st_dtype_bits(e.dtype));
        if (!size || *size != e.nbytes)
            fail(ACCEL_ERR_INVALID_ARGUMENT, "safetensors: tensor \"" + e.name + "\": " + std::to_string(e.nbytes) +
                                                 " bytes do not match shape " + shape_text(e.shape) + " x " +
                                                 st_dtype_name(e.dtype));
    }
    std::stable_sort(entries.begin(), entries.end(), [](const StWriteEntry &a, const StWriteEntry &b) {
        if (a.dtype != b.dtype) return static_cast<int>(a.dtype) > static_cast<int>(b.dtype);
        return a.name < b.name; // std::string compares bytes (as unsigned char)
    });
    std::string json = "{";
    bool first = true;
    if (metadata != nullptr) {
        json += "\"__metadata__\":{";
        for (size_t i = 0; i < metadata->size(); ++i)
            json += (i ? "," : "") + json_quote((*metadata)[i].first) + ":" + json_quote((*metadata)[i].second);
        json += "}";
        first = false;
    }
    uint64_t offset = 0;
    for (const auto &e : entries) {
        json += first ? "" : ",";
        first = false;
        json += json_quote(e.name) + ":{\"dtype\":\"" + st_dtype_name(e.dtype) + "\",\"shape\":" + shape_text(e.shape) +
                ",\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + e.nbytes) + "]}";
        offset += e.nbytes;
    }
    json += "}";
    while (json.size() % 8 != 0) json += ' ';
    std::string out(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
    return out + json;
}

} // namespace accel::ckpt
