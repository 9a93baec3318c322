// The strict JSON parser, the UTF-8 check and the writer helpers (see json.hpp).
#include "io/json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>

namespace psk::json {

namespace {

// Length of the well-formed UTF-8 sequence at p (at most `available` bytes), or 0 when it is
// malformed: a bad lead or continuation byte, truncated, overlong, a surrogate, or past U+10FFFF.
// ASCII bytes are sequences of length 1.
size_t utf8SequenceLength(const uint8_t* p, size_t available) {
    if (available == 0) return 0;
    const uint8_t lead = p[0];
    if (lead < 0x80) return 1;
    size_t length;
    unsigned cp;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
        cp = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        cp = lead & 0x0Fu;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        cp = lead & 0x07u;
    } else {
        return 0;
    }
    if (available < length) return 0;
    for (size_t k = 1; k < length; ++k) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (p[k] & 0x3Fu);
    }
    const bool overlong = (length == 3 && cp < 0x800) || (length == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return length;
}

void appendUtf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

bool isDigit(uint8_t c) { return c >= '0' && c <= '9'; }

class Parser {
public:
    Parser(std::string_view text, const Dialect& dialect)
        : text_(reinterpret_cast<const uint8_t*>(text.data())), size_(text.size()), dialect_(dialect) {}

    Value parseDocument() {
        skipSpace();
        Value value = parseValue(0);
        skipSpace();
        if (pos_ != size_) error("unexpected characters after the top-level value");
        return value;
    }

private:
    static constexpr int kMaxDepth = 64;
    const uint8_t* text_;
    size_t size_;
    const Dialect& dialect_;
    size_t pos_ = 0;

    [[noreturn]] void error(const std::string& what) const { throw ParseError(what, pos_); }

    std::string theEnd() const { return std::string("the end of the ") + dialect_.name; }

    void skipSpace() {
        while (pos_ < size_ && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    bool startsWith(const char* word) const {
        const std::string_view w(word);
        return size_ - pos_ >= w.size() && std::string_view(reinterpret_cast<const char*>(text_) + pos_, w.size()) == w;
    }

    void expect(char c) {
        if (pos_ >= size_) error(std::string("expected '") + c + "', found " + theEnd());
        if (text_[pos_] != uint8_t(c)) error(std::string("expected '") + c + "'");
        ++pos_;
    }

    Value parseValue(int depth) {
        if (depth > kMaxDepth) error("nested too deeply");
        if (pos_ >= size_) error("expected a value, found " + theEnd());
        const uint8_t c = text_[pos_];
        if (c == '{') return parseObject(depth);
        if (c == '[') return parseArray(depth);
        Value value;
        if (c == '"') {
            value.type = Value::Type::String;
            value.string = parseString();
            return value;
        }
        if (c == '-' || isDigit(c)) return parseNumber();
        if (c == 't' || c == 'f' || c == 'n') {
            if (dialect_.noLiterals)
                error(std::string("true, false and null are not expected in the ") + dialect_.name);
            for (const char* word : {"true", "false", "null"}) {
                if (!startsWith(word)) continue;
                pos_ += std::string_view(word).size();
                value.type = c == 'n' ? Value::Type::Null : Value::Type::Bool;
                value.boolean = c == 't';
                return value;
            }
        }
        error("expected a value");
    }

    // The opening bracket; true (and past the closing one) when the object or array is empty.
    bool open(char opening, char closing) {
        expect(opening);
        skipSpace();
        if (pos_ < size_ && text_[pos_] == uint8_t(closing)) {
            ++pos_;
            return true;
        }
        return false;
    }

    // After a member or an element: true past a ',' (another one follows), false past the closing bracket.
    bool another(char closing, const char* kind) {
        skipSpace();
        if (pos_ >= size_) error(std::string("unterminated ") + kind);
        if (text_[pos_] == ',') {
            ++pos_;
            return true;
        }
        if (text_[pos_] == uint8_t(closing)) {
            ++pos_;
            return false;
        }
        error(std::string("expected ',' or '") + closing + "' in an " + kind);
    }

    Value parseObject(int depth) {
        Value value;
        value.type = Value::Type::Object;
        if (open('{', '}')) return value;
        std::set<std::string> seen;  // only with uniqueKeys
        do {
            skipSpace();
            if (pos_ >= size_ || text_[pos_] != '"') error("expected a string key");
            std::string key = parseString();
            if (dialect_.uniqueKeys && !seen.insert(key).second) error("duplicate key \"" + key + "\"");
            skipSpace();
            expect(':');
            skipSpace();
            Value member = parseValue(depth + 1);
            value.object.emplace_back(std::move(key), std::move(member));
        } while (another('}', "object"));
        return value;
    }

    Value parseArray(int depth) {
        Value value;
        value.type = Value::Type::Array;
        if (open('[', ']')) return value;
        do {
            skipSpace();
            value.array.push_back(parseValue(depth + 1));
        } while (another(']', "array"));
        return value;
    }

    void digits() {
        if (pos_ >= size_ || !isDigit(text_[pos_])) error("expected a digit");
        while (pos_ < size_ && isDigit(text_[pos_])) ++pos_;
    }

    // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?, the integer part also accumulated exactly.
    Value parseNumber() {
        Value value;
        value.type = Value::Type::Number;
        const size_t start = pos_;
        if (text_[pos_] == '-') {
            value.negative = true;
            ++pos_;
        }
        if (pos_ >= size_ || !isDigit(text_[pos_])) error("expected a digit");
        if (text_[pos_] == '0' && pos_ + 1 < size_ && isDigit(text_[pos_ + 1]))
            error("leading zeros are not allowed in a number");
        bool fits = true;
        uint64_t n = 0;
        while (pos_ < size_ && isDigit(text_[pos_])) {
            const uint64_t digit = uint64_t(text_[pos_] - '0');
            if (fits && n > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
                if (dialect_.integersOnly) error("integer too large");
                fits = false;
            }
            if (fits) n = n * 10 + digit;
            ++pos_;
        }
        bool fraction = false;
        if (pos_ < size_ && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
            if (dialect_.integersOnly) error(std::string("only integers are expected in the ") + dialect_.name);
            fraction = true;
            if (text_[pos_] == '.') {
                ++pos_;
                digits();
            }
            if (pos_ < size_ && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
                ++pos_;
                if (pos_ < size_ && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
                digits();
            }
        }
        value.integer = fits && !fraction;
        value.magnitude = value.integer ? n : 0;
        const std::string literal(reinterpret_cast<const char*>(text_) + start, pos_ - start);
        value.number = std::strtod(literal.c_str(), nullptr);
        return value;
    }

    unsigned parseHex4() {
        if (size_ - pos_ < 4) error("truncated \\u escape");
        unsigned v = 0;
        for (int i = 0; i < 4; ++i) {
            const uint8_t c = text_[pos_++];
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= unsigned(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= unsigned(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= unsigned(c - 'A' + 10);
            else
                error("bad hex digit in a \\u escape");
        }
        return v;
    }

    // One raw UTF-8 sequence starting at pos_ (a lead byte >= 0x80), validated and copied.
    void copyUtf8Sequence(std::string& out) {
        const size_t length = utf8SequenceLength(text_ + pos_, size_ - pos_);
        if (length == 0) error("invalid UTF-8 in a string");
        out.append(reinterpret_cast<const char*>(text_ + pos_), length);
        pos_ += length;
    }

    std::string parseString() {
        expect('"');
        std::string out;
        for (;;) {
            if (pos_ >= size_) error("unterminated string");
            const uint8_t c = text_[pos_];
            if (c == '"') {
                ++pos_;
                return out;
            }
            if (c < 0x20) error("unescaped control character in a string");
            if (c >= 0x80) {
                copyUtf8Sequence(out);
                continue;
            }
            ++pos_;
            if (c != '\\') {
                out += char(c);
                continue;
            }
            if (pos_ >= size_) error("unterminated escape");
            const uint8_t e = text_[pos_++];
            switch (e) {
                case '"':
                    out += '"';
                    break;
                case '\\':
                    out += '\\';
                    break;
                case '/':
                    out += '/';
                    break;
                case 'b':
                    out += '\b';
                    break;
                case 'f':
                    out += '\f';
                    break;
                case 'n':
                    out += '\n';
                    break;
                case 'r':
                    out += '\r';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'u': {
                    unsigned cp = parseHex4();
                    if (cp >= 0xDC00 && cp <= 0xDFFF) error("unpaired low surrogate in a \\u escape");
                    if (cp >= 0xD800 && cp <= 0xDBFF) {
                        if (size_ - pos_ < 2 || text_[pos_] != '\\' || text_[pos_ + 1] != 'u')
                            error("unpaired high surrogate in a \\u escape");
                        pos_ += 2;
                        const unsigned low = parseHex4();
                        if (low < 0xDC00 || low > 0xDFFF) error("unpaired high surrogate in a \\u escape");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    }
                    appendUtf8(out, cp);
                    break;
                }
                default:
                    error("unknown escape in a string");
            }
        }
    }
};

}  // namespace

ParseError::ParseError(const std::string& reason_, size_t offset_)
    : std::runtime_error("JSON: " + reason_ + " at offset " + std::to_string(offset_)),
      reason(reason_),
      offset(offset_) {}

const Value* Value::find(const std::string& key) const {
    if (type != Type::Object) return nullptr;
    for (const auto& [k, v] : object)
        if (k == key) return &v;
    return nullptr;
}

double Value::num(const std::string& key, double fallback) const {
    const Value* v = find(key);
    return v && v->type == Type::Number ? v->number : fallback;
}

std::string Value::str(const std::string& key, const std::string& fallback) const {
    const Value* v = find(key);
    return v && v->type == Type::String ? v->string : fallback;
}

bool Value::flag(const std::string& key, bool fallback) const {
    const Value* v = find(key);
    return v && v->type == Type::Bool ? v->boolean : fallback;
}

Value parse(std::string_view text, const Dialect& dialect) { return Parser(text, dialect).parseDocument(); }

bool isValidUtf8(std::string_view s) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
    for (size_t i = 0; i < s.size();) {
        const size_t length = utf8SequenceLength(bytes + i, s.size() - i);
        if (length == 0) return false;
        i += length;
    }
    return true;
}

std::string quote(const std::string& s) {
    std::string out = "\"";
    for (const char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"':
                out += "\\\"";
                break;
            case '\\':
                out += "\\\\";
                break;
            case '\n':
                out += "\\n";
                break;
            case '\r':
                out += "\\r";
                break;
            case '\t':
                out += "\\t";
                break;
            default:
                if (c < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", c);
                    out += buf;
                } else {
                    out += ch;
                }
        }
    }
    return out + "\"";
}

std::string number(double v, int digits) {
    if (!std::isfinite(v)) return "null";
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", digits, v);
    return buf;
}

}  // namespace psk::json
