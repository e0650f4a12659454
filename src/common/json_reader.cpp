#include "common/json_reader.hpp"

#include "common/error.hpp"

#include <cstdio>
#include <set>

namespace accel {

const JsonValue *JsonValue::find(const std::string &key) const
{
    for (const auto &m : members)
        if (m.first == key) return &m.second;
    return nullptr;
}

namespace {

constexpr int kMaxDepth = 64;

class Parser {
public:
    Parser(const char *p, size_t n, const std::string &what) : p_(p), n_(n), what_(what) {}

    JsonValue parse_document()
    {
        skip_ws();
        JsonValue v = value(0);
        skip_ws();
        if (i_ != n_) error("unexpected data after the JSON value");
        return v;
    }

private:
    [[noreturn]] void error(const std::string &msg) const
    {
        fail(ACCEL_ERR_DATA_LOSS, what_ + ": invalid JSON at byte " + std::to_string(i_) + ": " + msg);
    }
    void skip_ws()
    {
        while (i_ < n_ && (p_[i_] == ' ' || p_[i_] == '\t' || p_[i_] == '\n' || p_[i_] == '\r')) ++i_;
    }
    bool consume(char c)
    {
        if (i_ < n_ && p_[i_] == c) {
            ++i_;
            return true;
        }
        return false;
    }
    void expect_word(const char *w)
    {
        for (const char *c = w; *c; ++c)
            if (!consume(*c)) error(std::string("expected \"") + w + "\"");
    }

    JsonValue value(int depth)
    {
        if (depth > kMaxDepth) error("nesting deeper than " + std::to_string(kMaxDepth));
        if (i_ >= n_) error("unexpected end");
        JsonValue v;
        char c = p_[i_];
        if (c == '{') {
            v.kind = JsonValue::Kind::Object;
            ++i_;
            skip_ws();
            if (consume('}')) return v;
            std::set<std::string> seen;
            for (;;) {
                skip_ws();
                if (i_ >= n_ || p_[i_] != '"') error("expected a string key");
                std::string key = string();
                if (!seen.insert(key).second) error("duplicate key \"" + key + "\"");
                skip_ws();
                if (!consume(':')) error("expected ':'");
                skip_ws();
                JsonValue member = value(depth + 1);
                v.members.emplace_back(std::move(key), std::move(member));
                skip_ws();
                if (consume(',')) continue;
                if (consume('}')) break;
                error("expected ',' or '}'");
            }
        } else if (c == '[') {
            v.kind = JsonValue::Kind::Array;
            ++i_;
            skip_ws();
            if (consume(']')) return v;
            for (;;) {
                skip_ws();
                v.items.push_back(value(depth + 1));
                skip_ws();
                if (consume(',')) continue;
                if (consume(']')) break;
                error("expected ',' or ']'");
            }
        } else if (c == '"') {
            v.kind = JsonValue::Kind::String;
            v.text = string();
        } else if (c == 't') {
            expect_word("true");
            v.kind = JsonValue::Kind::Bool;
            v.boolean = true;
        } else if (c == 'f') {
            expect_word("false");
            v.kind = JsonValue::Kind::Bool;
        } else if (c == 'n') {
            expect_word("null");
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            number(v);
        } else {
            error(std::string("unexpected character '") + c + "'");
        }
        return v;
    }

    void number(JsonValue &v)
    {
        size_t start = i_;
        bool neg = consume('-');
        if (i_ >= n_ || !(p_[i_] >= '0' && p_[i_] <= '9')) error("expected a digit");
        bool overflow = false;
        uint64_t x = 0;
        if (p_[i_] == '0') {
            ++i_;
        } else {
            while (i_ < n_ && p_[i_] >= '0' && p_[i_] <= '9') {
                uint64_t d = static_cast<uint64_t>(p_[i_] - '0');
                if (x > (UINT64_MAX - d) / 10) overflow = true;
                else x = x * 10 + d;
                ++i_;
            }
        }
        bool integer = true;
        if (consume('.')) {
            integer = false;
            if (i_ >= n_ || !(p_[i_] >= '0' && p_[i_] <= '9')) error("expected a digit after '.'");
            while (i_ < n_ && p_[i_] >= '0' && p_[i_] <= '9') ++i_;
        }
        if (i_ < n_ && (p_[i_] == 'e' || p_[i_] == 'E')) {
            integer = false;
            ++i_;
            if (i_ < n_ && (p_[i_] == '+' || p_[i_] == '-')) ++i_;
            if (i_ >= n_ || !(p_[i_] >= '0' && p_[i_] <= '9')) error("expected a digit in the exponent");
            while (i_ < n_ && p_[i_] >= '0' && p_[i_] <= '9') ++i_;
        }
        v.kind = JsonValue::Kind::Number;
        v.text.assign(p_ + start, i_ - start);
        v.is_uint = integer && !neg && !overflow;
        v.uint_value = v.is_uint ? x : 0;
    }

    unsigned hex4()
    {
        if (n_ - i_ < 4) error("truncated \\u escape");
        unsigned u = 0;
        for (int k = 0; k < 4; ++k) {
            char h = p_[i_++];
            u <<= 4;
            if (h >= '0' && h <= '9') u |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') u |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') u |= static_cast<unsigned>(h - 'A' + 10);
            else error("bad hex digit in \\u escape");
        }
        return u;
    }

    static void put_utf8(std::string &s, unsigned cp)
    {
        if (cp < 0x80) s += static_cast<char>(cp);
        else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            s += static_cast<char>(0xF0 | (cp >> 18));
            s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    // Validates one UTF-8 sequence starting at i_ and appends it.
    void utf8_char(std::string &s)
    {
        unsigned char c = static_cast<unsigned char>(p_[i_]);
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || n_ - i_ < static_cast<size_t>(len)) error("invalid UTF-8");
        for (int k = 1; k < len; ++k)
            if ((static_cast<unsigned char>(p_[i_ + k]) & 0xC0) != 0x80) error("invalid UTF-8");
        s.append(p_ + i_, static_cast<size_t>(len));
        i_ += static_cast<size_t>(len);
    }

    std::string string()
    {
        ++i_; // opening quote
        std::string s;
        for (;;) {
            if (i_ >= n_) error("unterminated string");
            char c = p_[i_];
            if (c == '"') {
                ++i_;
                return s;
            }
            if (static_cast<unsigned char>(c) < 0x20) error("control character in a string");
            if (c != '\\') {
                utf8_char(s);
                continue;
            }
            ++i_;
            if (i_ >= n_) error("unterminated escape");
            char e = p_[i_++];
            switch (e) {
            case '"': s += '"'; break;
            case '\\': s += '\\'; break;
            case '/': s += '/'; break;
            case 'b': s += '\b'; break;
            case 'f': s += '\f'; break;
            case 'n': s += '\n'; break;
            case 'r': s += '\r'; break;
            case 't': s += '\t'; break;
            case 'u': {
                unsigned cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00) {
                    if (!(consume('\\') && consume('u'))) error("unpaired surrogate");
                    unsigned lo = hex4();
                    if (lo < 0xDC00 || lo > 0xDFFF) error("unpaired surrogate");
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                } else if (cp >= 0xDC00 && cp < 0xE000) {
                    error("unpaired surrogate");
                }
                put_utf8(s, cp);
                break;
            }
            default: error(std::string("bad escape \\") + e);
            }
        }
    }

    const char *p_;
    size_t n_;
    size_t i_ = 0;
    const std::string &what_;
};

} // namespace

JsonValue parse_json(const char *text, size_t len, const std::string &what)
{
    return Parser(text, len, what).parse_document();
}

std::string json_quote(const std::string &s)
{
    std::string out = "\"";
    for (char ch : s) {
        unsigned char c = static_cast<unsigned char>(ch);
        if (c == '"') out += "\\\"";
        else if (c == '\\') out += "\\\\";
        else if (c == '\n') out += "\\n";
        else if (c == '\r') out += "\\r";
        else if (c == '\t') out += "\\t";
        else if (c == '\b') out += "\\b";
        else if (c == '\f') out += "\\f";
        else if (c < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else out += ch;
    }
    out += '"';
    return out;
}

} // namespace accel
