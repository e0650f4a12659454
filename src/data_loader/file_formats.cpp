#include "data_loader/file_formats.hpp"

#include "common/error.hpp"

#include <cstring>
#include <limits>

namespace accel {

namespace {

struct ElemInfo {
    ElemType type;
    const char *name;
    size_t size;
    bool integer;
    char npy_kind; // numpy's kind character of the descr ('b', 'u', 'i', 'f'); 0: no npy descr
};

// bfloat16 has no numpy descr (ml_dtypes writes it as void "|V2"), so .npy files cannot carry it.
constexpr ElemInfo kElems[] = {
    {ElemType::Bool, "bool", 1, false, 'b'},   {ElemType::U8, "uint8", 1, true, 'u'},
    {ElemType::I8, "int8", 1, true, 'i'},      {ElemType::U16, "uint16", 2, true, 'u'},
    {ElemType::I16, "int16", 2, true, 'i'},    {ElemType::U32, "uint32", 4, true, 'u'},
    {ElemType::I32, "int32", 4, true, 'i'},    {ElemType::U64, "uint64", 8, true, 'u'},
    {ElemType::I64, "int64", 8, true, 'i'},    {ElemType::F16, "float16", 2, false, 'f'},
    {ElemType::BF16, "bfloat16", 2, false, 0}, {ElemType::F32, "float32", 4, false, 'f'},
    {ElemType::F64, "float64", 8, false, 'f'},
};

const ElemInfo &info(ElemType t)
{
    for (const auto &e : kElems)
        if (e.type == t) return e;
    fail(ACCEL_ERR_INTERNAL, "unknown element type");
}

[[noreturn]] void bad(const std::string &what, const std::string &rule)
{
    fail(ACCEL_ERR_DATA_LOSS, what + ": " + rule);
}

// A cursor over the header's Python dict literal (numpy writes it with repr(): single-quoted keys and
// strings, True/False, a tuple of ints).
class Literal {
public:
    Literal(const char *p, const char *end, const std::string &what) : p_(p), end_(end), what_(what) {}
    void skip_space()
    {
        while (p_ < end_ && (*p_ == ' ' || *p_ == '\t')) ++p_;
    }
    bool take(char c)
    {
        skip_space();
        if (p_ < end_ && *p_ == c) {
            ++p_;
            return true;
        }
        return false;
    }
    void expect(char c, const char *where)
    {
        if (!take(c)) bad(what_, std::string("npy header: expected '") + c + "' " + where);
    }
    std::string string()
    {
        skip_space();
        if (p_ >= end_ || (*p_ != '\'' && *p_ != '"')) bad(what_, "npy header: expected a quoted string");
        const char q = *p_++;
        std::string s;
        while (p_ < end_ && *p_ != q) {
            if (*p_ == '\\') bad(what_, "npy header: escapes are not expected in its strings");
            s += *p_++;
        }
        if (p_ >= end_) bad(what_, "npy header: unterminated string");
        ++p_;
        return s;
    }
    bool boolean()
    {
        skip_space();
        for (const auto &[word, value] : {std::pair<const char *, bool>{"True", true}, {"False", false}}) {
            const size_t n = std::strlen(word);
            if (static_cast<size_t>(end_ - p_) >= n && std::memcmp(p_, word, n) == 0) {
                p_ += n;
                return value;
            }
        }
        bad(what_, "npy header: fortran_order must be True or False");
    }
    std::vector<int64_t> tuple()
    {
        expect('(', "to open the shape");
        std::vector<int64_t> dims;
        while (!take(')')) {
            if (!dims.empty()) expect(',', "between shape dimensions");
            if (take(')')) break; // (5,) or a trailing comma
            skip_space();
            int64_t v = 0;
            const char *start = p_;
            while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
                if (v > (std::numeric_limits<int64_t>::max() - (*p_ - '0')) / 10)
                    bad(what_, "npy header: a shape dimension overflows int64");
                v = v * 10 + (*p_++ - '0');
            }
            if (p_ == start) bad(what_, "npy header: expected a non-negative integer in the shape");
            if (dims.size() >= 32) bad(what_, "npy header: more than 32 dimensions");
            dims.push_back(v);
        }
        return dims;
    }
    bool at_end()
    {
        skip_space();
        return p_ == end_;
    }

private:
    const char *p_;
    const char *end_;
    const std::string &what_;
};

ElemType parse_descr(const std::string &d, const std::string &what)
{
    // '<' little-endian, '|' not applicable (1-byte types), '=' native (little-endian here).
    if (d.size() < 3 || (d[0] != '<' && d[0] != '|' && d[0] != '=')) {
        if (!d.empty() && d[0] == '>')
            fail(ACCEL_ERR_UNIMPLEMENTED, what + ": big-endian dtype \"" + d + "\" (write the array little-endian)");
        fail(ACCEL_ERR_UNIMPLEMENTED, what + ": unsupported dtype \"" + d + "\" (expected a little-endian bool, integer or float)");
    }
    const std::string digits = d.substr(2);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 2)
        fail(ACCEL_ERR_UNIMPLEMENTED, what + ": unsupported dtype \"" + d + "\"");
    const size_t size = std::stoul(digits);
    for (const auto &e : kElems)
        if (e.npy_kind == d[1] && e.size == size) {
            if (size > 1 && d[0] == '|') bad(what, "npy header: dtype \"" + d + "\" of several bytes has no byte order");
            return e.type;
        }
    fail(ACCEL_ERR_UNIMPLEMENTED, what + ": unsupported dtype \"" + d + "\" (expected a little-endian bool, integer or float)");
}

uint32_t little_endian(const uint8_t *p, int bytes)
{
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

} // namespace

size_t elem_size(ElemType t) { return info(t).size; }
bool elem_is_integer(ElemType t) { return info(t).integer; }
const char *elem_name(ElemType t) { return info(t).name; }

std::optional<ElemType> elem_from_name(const std::string &name)
{
    for (const auto &e : kElems)
        if (name == e.name) return e.type;
    return std::nullopt;
}

uint64_t NpyHeader::numel() const
{
    uint64_t n = 1;
    for (int64_t d : shape) n *= static_cast<uint64_t>(d); // checked against the file size by the parser
    return n;
}

NpyHeader parse_npy_header(const uint8_t *bytes, size_t len, uint64_t file_size, const std::string &what)
{
    static const uint8_t kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
    if (file_size < 10 || len < 10 || std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
        bad(what, "not a .npy file (no \\x93NUMPY magic)");
    const int major = bytes[6];
    if (major < 1 || major > 3)
        bad(what, "npy format version " + std::to_string(major) + "." + std::to_string(bytes[7]) + " (expected 1.0, 2.0 or 3.0)");
    const int len_bytes = major == 1 ? 2 : 4;
    const size_t prefix = 6 + 2 + static_cast<size_t>(len_bytes);
    if (len < prefix || file_size < prefix) bad(what, "npy header: the file ends inside the header length");
    const uint64_t hlen = little_endian(bytes + 8, len_bytes);
    if (hlen > kMaxNpyHeaderBytes) bad(what, "npy header: " + std::to_string(hlen) + " bytes (at most " +
                                                 std::to_string(kMaxNpyHeaderBytes) + " accepted)");
    if (prefix + hlen > file_size || prefix + hlen > len) bad(what, "npy header: the file ends inside the header");
    const char *h = reinterpret_cast<const char *>(bytes + prefix);
    const char *end = h + hlen;
    for (const char *c = h; c < end; ++c)
        if (*c == '\0') bad(what, "npy header: a NUL byte in the header");
    // numpy pads with spaces and ends with a newline; the newline is required.
    if (hlen == 0 || end[-1] != '\n') bad(what, "npy header: it does not end with a newline");
    --end;

    Literal lit(h, end, what);
    lit.expect('{', "at the start of the header dict");
    std::optional<ElemType> type;
    std::optional<bool> fortran;
    std::optional<std::vector<int64_t>> shape;
    while (!lit.take('}')) {
        const std::string key = lit.string();
        lit.expect(':', "after a key");
        if (key == "descr" && !type) {
            type = parse_descr(lit.string(), what);
        } else if (key == "fortran_order" && !fortran) {
            fortran = lit.boolean();
        } else if (key == "shape" && !shape) {
            shape = lit.tuple();
        } else {
            bad(what, "npy header: unexpected or repeated key \"" + key + "\"");
        }
        if (!lit.take(',')) {
            lit.expect('}', "to close the header dict");
            break;
        }
    }
    if (!lit.at_end()) bad(what, "npy header: text after the dict");
    if (!type || !fortran || !shape) bad(what, "npy header: descr, fortran_order and shape are all required");
    if (*fortran)
        fail(ACCEL_ERR_UNIMPLEMENTED, what + ": fortran_order is True (write the array in C order: np.ascontiguousarray)");

    NpyHeader out;
    out.type = *type;
    out.shape = std::move(*shape);
    out.data_offset = prefix + hlen;
    // The data must fill the rest of the file exactly: a header that lies about the shape is refused here,
    // not discovered as a short read in the middle of training.
    const uint64_t available = file_size - out.data_offset;
    uint64_t expected = elem_size(out.type);
    bool overflow = false;
    for (int64_t d : out.shape) overflow |= __builtin_mul_overflow(expected, static_cast<uint64_t>(d), &expected);
    for (int64_t d : out.shape) overflow &= d != 0; // a zero dimension makes the array empty whatever the rest
    if (overflow) expected = UINT64_MAX;            // more than any file holds: reported below
    if (expected != available) {
        std::string shape;
        for (int64_t x : out.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(x);
        bad(what, "npy header: its shape (" + shape + ") and dtype " + elem_name(out.type) + " make " +
                      (overflow ? std::string("more than 2^64") : std::to_string(expected)) + " data bytes, the file has " +
                      std::to_string(available));
    }
    return out;
}

} // namespace accel
