#include "json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace psk::json {

namespace {

class Parser {
public:
    explicit Parser(const std::string& t) : s_(t) {}

    Value document() {
        Value v = value(0);
        space();
        if (i_ != s_.size()) error("text after the JSON value");
        return v;
    }

private:
    [[noreturn]] void error(const std::string& what) const {
        throw ParseError("JSON: " + what + " at offset " + std::to_string(i_));
    }
    void space() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
    }
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    bool literal(const char* word) {
        const std::string w = word;
        if (s_.compare(i_, w.size(), w) != 0) return false;
        i_ += w.size();
        return true;
    }

    Value value(int depth) {
        if (depth > 64) error("nesting too deep");
        space();
        Value v;
        const char c = peek();
        if (c == '{') {
            v.type = Value::Type::Object;
            ++i_;
            space();
            if (peek() == '}') {
                ++i_;
                return v;
            }
            for (;;) {
                space();
                if (peek() != '"') error("expected a member name");
                std::string key = stringBody();
                space();
                if (peek() != ':') error("expected ':'");
                ++i_;
                v.object.emplace_back(std::move(key), value(depth + 1));
                space();
                if (peek() == ',') {
                    ++i_;
                    continue;
                }
                if (peek() == '}') {
                    ++i_;
                    return v;
                }
                error("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v.type = Value::Type::Array;
            ++i_;
            space();
            if (peek() == ']') {
                ++i_;
                return v;
            }
            for (;;) {
                v.array.push_back(value(depth + 1));
                space();
                if (peek() == ',') {
                    ++i_;
                    continue;
                }
                if (peek() == ']') {
                    ++i_;
                    return v;
                }
                error("expected ',' or ']'");
            }
        }
        if (c == '"') {
            v.type = Value::Type::String;
            v.string = stringBody();
            return v;
        }
        if (literal("true")) {
            v.type = Value::Type::Bool;
            v.boolean = true;
            return v;
        }
        if (literal("false")) {
            v.type = Value::Type::Bool;
            return v;
        }
        if (literal("null")) return v;
        if (c == '-' || (c >= '0' && c <= '9')) {
            v.type = Value::Type::Number;
            v.number = numberBody();
            return v;
        }
        error("unexpected character");
    }

    double numberBody() {
        const size_t start = i_;
        auto digits = [&]() {
            const size_t d = i_;
            while (peek() >= '0' && peek() <= '9') ++i_;
            if (i_ == d) error("malformed number");
        };
        if (peek() == '-') ++i_;
        if (peek() == '0') {
            ++i_;
        } else {
            digits();
        }
        if (peek() == '.') {
            ++i_;
            digits();
        }
        if (peek() == 'e' || peek() == 'E') {
            ++i_;
            if (peek() == '+' || peek() == '-') ++i_;
            digits();
        }
        return std::strtod(s_.substr(start, i_ - start).c_str(), nullptr);
    }

    void appendUtf8(std::string& out, uint32_t cp) {
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

    uint32_t hex4() {
        if (i_ + 4 > s_.size()) error("truncated \\u escape");
        uint32_t v = 0;
        for (int k = 0; k < 4; ++k) {
            const char h = s_[i_++];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= uint32_t(h - '0');
            else if (h >= 'a' && h <= 'f') v |= uint32_t(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= uint32_t(h - 'A' + 10);
            else error("bad \\u escape");
        }
        return v;
    }

    std::string stringBody() {
        ++i_;  // opening quote
        std::string out;
        for (;;) {
            if (i_ >= s_.size()) error("unterminated string");
            const unsigned char c = static_cast<unsigned char>(s_[i_++]);
            if (c == '"') return out;
            if (c < 0x20) error("control character in a string");
            if (c != '\\') {
                out += char(c);
                continue;
            }
            if (i_ >= s_.size()) error("unterminated string");
            const char e = s_[i_++];
            switch (e) {
                case '"': out += '"'; break;
                case '\\': out += '\\'; break;
                case '/': out += '/'; break;
                case 'b': out += '\b'; break;
                case 'f': out += '\f'; break;
                case 'n': out += '\n'; break;
                case 'r': out += '\r'; break;
                case 't': out += '\t'; break;
                case 'u': {
                    uint32_t cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00) {
                        if (!literal("\\u")) error("lone high surrogate");
                        const uint32_t lo = hex4();
                        if (lo < 0xDC00 || lo >= 0xE000) error("bad low surrogate");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    } else if (cp >= 0xDC00 && cp < 0xE000) {
                        error("lone low surrogate");
                    }
                    appendUtf8(out, cp);
                    break;
                }
                default: error("bad escape");
            }
        }
    }

    const std::string& s_;
    size_t i_ = 0;
};

}  // namespace

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

Value parse(const std::string& text) { return Parser(text).document(); }

std::string quote(const std::string& s) {
    std::string out = "\"";
    for (const char ch : s) {
        const unsigned char c = static_cast<unsigned char>(ch);
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
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
