#include "sketch/sketch_weights.hpp"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <utility>

#include "util/float16.hpp"

#include "util/error.hpp"

// The portable generator relies on IEEE binary64 arithmetic evaluated without excess precision
// and without contraction (see sketch_weights.hpp).
static_assert(std::numeric_limits<double>::is_iec559, "polysketch needs IEEE-754 doubles");
static_assert(std::numeric_limits<float>::is_iec559, "polysketch needs IEEE-754 floats");
#if defined(__FAST_MATH__)
#error "sketch_weights.cpp must not be compiled with -ffast-math: seeded sketches would not be portable"
#endif
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "sketch_weights.cpp needs FLT_EVAL_METHOD == 0 (on 32-bit x86 compile with -msse2 -mfpmath=sse)"
#endif

namespace psk {

// =============================================================================================
// Philox4x32-10
// =============================================================================================

namespace {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
}  // namespace

std::array<uint32_t, 4> philox4x32_10(const std::array<uint32_t, 4>& counter, const std::array<uint32_t, 2>& key) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kPhiloxW0;
            k1 += kPhiloxW1;
        }
        const uint64_t p0 = uint64_t(kPhiloxM0) * c0;
        const uint64_t p1 = uint64_t(kPhiloxM1) * c2;
        const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
        const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    return {c0, c1, c2, c3};
}

// =============================================================================================
// Deterministic elementary functions and the Gaussian entries. Everything between the pragmas is
// built from IEEE basic operations in a fixed order, with FP contraction (FMA fusion) off.
// =============================================================================================

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

namespace portable_math {
namespace {
constexpr double kLn2Hi = 0x1.62e42feep-1;            // ln 2, high part: k * kLn2Hi is exact for |k| < 2^11
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;      // ln 2 - kLn2Hi
constexpr double kHalfPi = 0x1.921fb54442d18p+0;      // pi / 2, rounded
constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;    // sqrt(1/2), rounded
constexpr uint64_t kTwo50 = uint64_t(1) << 50;
constexpr uint64_t kTwo51 = uint64_t(1) << 51;
constexpr uint64_t kTwo53 = uint64_t(1) << 53;

// A value rounded to double before it feeds an addition, whatever the FP-contraction mode: the
// pragmas above are not honoured by every compiler under every flag (Clang ignores them with an
// explicit -ffp-contract=fast), a volatile store always is. Every product or quotient that feeds
// an addition below goes through it, so no a*b+c can be fused into an FMA.
double rounded(double value) {
    volatile double stored = value;
    return stored;
}
double roundedProduct(double a, double b) { return rounded(a * b); }

// cos x and sin x for x in [0, pi/4]: nested Taylor series, 10 terms (truncation < 1e-19).
double cosSmall(double x2) {
    double c = 1.0;
    for (int k = 10; k >= 1; --k) c = 1.0 - rounded(c * x2 / double((2 * k - 1) * (2 * k)));
    return c;
}
double sinSmall(double x, double x2) {
    double s = 1.0;
    for (int k = 10; k >= 1; --k) s = 1.0 - rounded(s * x2 / double((2 * k) * (2 * k + 1)));
    return x * s;
}
}  // namespace

double logUnit53(uint64_t a) {
    // u = m / 2^53 with m = a + 1 in [1, 2^53]; m = f * 2^bits with f in [1/2, 1), exactly.
    const uint64_t m = (a & (kTwo53 - 1)) + 1;
    int bits = 0;
    for (uint64_t t = m; t != 0; t >>= 1) ++bits;
    double f = std::ldexp(double(m), -bits);  // exact (a power-of-two scaling)
    int k = bits - 53;
    if (f < kSqrtHalf) {
        f = f + f;
        k -= 1;
    }
    // ln f = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...), |s| <= 0.1716, 13 terms (< 1e-19).
    const double s = (f - 1.0) / (f + 1.0);
    const double s2 = s * s;
    double p = 1.0 / 25.0;
    for (int j = 11; j >= 0; --j) p = 1.0 / double(2 * j + 1) + roundedProduct(s2, p);
    const double lnF = roundedProduct(s + s, p);
    const double dk = double(k);
    return roundedProduct(dk, kLn2Hi) + (roundedProduct(dk, kLn2Lo) + lnF);
}

double cosTurn53(uint64_t b) {
    // theta = 2 pi b / 2^53 = (pi/2) (quadrant + w / 2^51): exact integer reduction.
    b &= kTwo53 - 1;
    const unsigned quadrant = unsigned(b >> 51);
    const uint64_t w = b & (kTwo51 - 1);
    const bool reflect = w > kTwo50;  // alpha > pi/4: use pi/2 - alpha
    const uint64_t t = reflect ? kTwo51 - w : w;  // in [0, 2^50]
    const double x = double(t) * 0x1p-51 * kHalfPi;  // in [0, pi/4]
    const double x2 = x * x;
    const double c = cosSmall(x2), s = sinSmall(x, x2);
    const double cosAlpha = reflect ? s : c;
    const double sinAlpha = reflect ? c : s;
    switch (quadrant) {
        case 0:
            return cosAlpha;
        case 1:
            return -sinAlpha;
        case 2:
            return -cosAlpha;
        default:
            return sinAlpha;
    }
}
}  // namespace portable_math

double gaussianEntry(uint64_t seed, uint32_t streamId, uint64_t index) {
    const std::array<uint32_t, 4> x = philox4x32_10({uint32_t(index), uint32_t(index >> 32), streamId, 0u},
                                                    {uint32_t(seed), uint32_t(seed >> 32)});
    const uint64_t a = (uint64_t(x[0]) << 21) | (x[1] >> 11);
    const uint64_t b = (uint64_t(x[2]) << 21) | (x[3] >> 11);
    double r2 = -2.0 * portable_math::logUnit53(a);
    if (!(r2 > 0.0)) r2 = 0.0;  // u1 = 1: avoid -0
    return std::sqrt(r2) * portable_math::cosTurn53(b);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

void gaussianMatrix(uint64_t seed, uint32_t streamId, uint32_t rows, uint32_t cols, std::vector<float>& out) {
    const uint64_t count = uint64_t(rows) * cols;
    if (count > std::numeric_limits<size_t>::max() / sizeof(float))
        fail(PSK_ERROR_TOO_LARGE, "gaussianMatrix: ", rows, " x ", cols, " is too large");
    out.resize(size_t(count));
    for (uint64_t e = 0; e < count; ++e) out[size_t(e)] = static_cast<float>(gaussianEntry(seed, streamId, e));
}

// =============================================================================================
// Random sketch layout
// =============================================================================================

bool isSupportedSketchDegree(uint32_t degree) { return degree == 2 || degree == 4 || degree == 8; }

uint32_t randomSketchStreamId(uint32_t level, uint32_t index, bool b) {
    return (level << 24) | (index << 1) | (b ? 1u : 0u);
}

std::string randomSketchTensorName(uint32_t level, uint32_t index, bool b) {
    return cat("g", level, "_", index, b ? "b" : "a");
}

std::vector<SketchTensorSpec> randomSketchTensorSpecs(uint32_t degree, uint32_t headDim, uint32_t sketchSize) {
    if (!isSupportedSketchDegree(degree))
        fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: degree ", degree, " is not supported (2, 4 or 8)");
    std::vector<SketchTensorSpec> specs;
    const uint32_t m = degree / 2;
    for (uint32_t level = 1; (m >> level) != 0; ++level) {
        for (uint32_t i = 0; i < (m >> level); ++i) {
            for (bool b : {false, true}) {
                specs.push_back({randomSketchTensorName(level, i, b), level, i, b, level == 1 ? headDim : sketchSize,
                                 sketchSize});
            }
        }
    }
    return specs;
}

RandomSketchWeights generateRandomSketch(uint64_t seed, uint32_t degree, uint32_t h, uint32_t r) {
    if (!isSupportedSketchDegree(degree))
        fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: degree ", degree, " is not supported (2, 4 or 8)");
    if (h == 0 || r == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: h = ", h, " and r = ", r, " must be non-zero");
    RandomSketchWeights weights;
    weights.degree = degree;
    weights.headDim = h;
    weights.sketchSize = r;
    weights.referenceScaling = false;
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(degree, h, r))
        gaussianMatrix(seed, randomSketchStreamId(spec.level, spec.index, spec.b), spec.rows, spec.cols,
                       weights.g[spec.name]);
    return weights;
}

std::string learnedSketchTensorName(uint32_t branch, uint32_t level, const char* part) {
    return cat("f", branch + 1, ".", level, ".", part);
}

// =============================================================================================
// A strict JSON parser for safetensors headers: objects, arrays, strings, integers.
// =============================================================================================

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

struct JsonValue {
    enum class Type { Object, Array, String, Integer };
    Type type = Type::Object;
    std::string string;
    bool negative = false;
    uint64_t magnitude = 0;
    std::vector<std::pair<std::string, JsonValue>> members;  // file order
    std::vector<JsonValue> items;
};

const char* typeName(JsonValue::Type type) {
    switch (type) {
        case JsonValue::Type::Object:
            return "an object";
        case JsonValue::Type::Array:
            return "an array";
        case JsonValue::Type::String:
            return "a string";
        default:
            return "an integer";
    }
}

class JsonParser {
public:
    JsonParser(const uint8_t* text, size_t size) : text_(text), size_(size) {}

    JsonValue parseDocument() {
        skipSpace();
        JsonValue value = parseValue(0);
        skipSpace();
        if (pos_ != size_) error("unexpected characters after the top-level value");
        return value;
    }

private:
    static constexpr int kMaxDepth = 64;
    const uint8_t* text_;
    size_t size_;
    size_t pos_ = 0;

    [[noreturn]] void error(const std::string& what) const {
        fail(PSK_ERROR_BAD_FILE, "safetensors header is not valid JSON: ", what, " (at byte ", pos_,
             " of the header)");
    }

    void skipSpace() {
        while (pos_ < size_ && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
            ++pos_;
    }

    void expect(char c) {
        if (pos_ >= size_) error(cat("expected '", c, "', found the end of the header"));
        if (text_[pos_] != uint8_t(c)) error(cat("expected '", c, "'"));
        ++pos_;
    }

    JsonValue parseValue(int depth) {
        if (depth > kMaxDepth) error("nested too deeply");
        if (pos_ >= size_) error("expected a value, found the end of the header");
        const uint8_t c = text_[pos_];
        if (c == '{') return parseObject(depth);
        if (c == '[') return parseArray(depth);
        if (c == '"') {
            JsonValue value;
            value.type = JsonValue::Type::String;
            value.string = parseString();
            return value;
        }
        if (c == '-' || (c >= '0' && c <= '9')) return parseInteger();
        if (c == 't' || c == 'f' || c == 'n') error("true, false and null are not expected in a safetensors header");
        error("expected a value");
    }

    JsonValue parseObject(int depth) {
        JsonValue value;
        value.type = JsonValue::Type::Object;
        expect('{');
        skipSpace();
        if (pos_ < size_ && text_[pos_] == '}') {
            ++pos_;
            return value;
        }
        std::set<std::string> seen;
        for (;;) {
            skipSpace();
            if (pos_ >= size_ || text_[pos_] != '"') error("expected a string key");
            std::string key = parseString();
            if (!seen.insert(key).second) error(cat("duplicate key \"", key, "\""));
            skipSpace();
            expect(':');
            skipSpace();
            JsonValue member = parseValue(depth + 1);
            value.members.emplace_back(std::move(key), std::move(member));
            skipSpace();
            if (pos_ >= size_) error("unterminated object");
            if (text_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (text_[pos_] == '}') {
                ++pos_;
                return value;
            }
            error("expected ',' or '}' in an object");
        }
    }

    JsonValue parseArray(int depth) {
        JsonValue value;
        value.type = JsonValue::Type::Array;
        expect('[');
        skipSpace();
        if (pos_ < size_ && text_[pos_] == ']') {
            ++pos_;
            return value;
        }
        for (;;) {
            skipSpace();
            value.items.push_back(parseValue(depth + 1));
            skipSpace();
            if (pos_ >= size_) error("unterminated array");
            if (text_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (text_[pos_] == ']') {
                ++pos_;
                return value;
            }
            error("expected ',' or ']' in an array");
        }
    }

    JsonValue parseInteger() {
        JsonValue value;
        value.type = JsonValue::Type::Integer;
        if (text_[pos_] == '-') {
            value.negative = true;
            ++pos_;
        }
        if (pos_ >= size_ || text_[pos_] < '0' || text_[pos_] > '9') error("expected a digit");
        if (text_[pos_] == '0' && pos_ + 1 < size_ && text_[pos_ + 1] >= '0' && text_[pos_ + 1] <= '9')
            error("leading zeros are not allowed in a number");
        uint64_t n = 0;
        while (pos_ < size_ && text_[pos_] >= '0' && text_[pos_] <= '9') {
            const uint64_t digit = uint64_t(text_[pos_] - '0');
            if (n > (std::numeric_limits<uint64_t>::max() - digit) / 10) error("integer too large");
            n = n * 10 + digit;
            ++pos_;
        }
        if (pos_ < size_ && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E'))
            error("only integers are expected in a safetensors header");
        value.magnitude = n;
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

    static void appendUtf8(std::string& out, unsigned cp) {
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

bool isValidUtf8(const std::string& s) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(s.data());
    for (size_t i = 0; i < s.size();) {
        const size_t length = utf8SequenceLength(bytes + i, s.size() - i);
        if (length == 0) return false;
        i += length;
    }
    return true;
}

void writeJsonString(std::string& out, const std::string& s) {
    static const char* const kHex = "0123456789abcdef";
    out += '"';
    for (const char ch : s) {
        const uint8_t c = uint8_t(ch);
        if (c == '"' || c == '\\') {
            out += '\\';
            out += ch;
        } else if (c < 0x20) {
            out += "\\u00";
            out += kHex[c >> 4];
            out += kHex[c & 0xF];
        } else {
            out += ch;
        }
    }
    out += '"';
}

std::string shapeString(const std::vector<uint32_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
    return s + "]";
}

uint64_t readLe64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

uint64_t nonNegative(const JsonValue& value, const std::string& what) {
    if (value.type != JsonValue::Type::Integer)
        fail(PSK_ERROR_BAD_FILE, "safetensors: ", what, " must be an integer, not ", typeName(value.type));
    if (value.negative && value.magnitude != 0)
        fail(PSK_ERROR_BAD_FILE, "safetensors: ", what, " is negative (-", value.magnitude, ")");
    return value.magnitude;
}

constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;

}  // namespace

// =============================================================================================
// safetensors
// =============================================================================================

SafeTensors parseSafeTensors(const uint8_t* bytes, size_t size) {
    if (size < 8)
        fail(PSK_ERROR_BAD_FILE, "safetensors: file truncated: ", size,
             " bytes, fewer than the 8-byte header length");
    const uint64_t headerBytes = readLe64(bytes);
    if (headerBytes > kMaxHeaderBytes)
        fail(PSK_ERROR_BAD_FILE, "safetensors: header length ", headerBytes, " exceeds the limit of ",
             kMaxHeaderBytes, " bytes (not a safetensors file?)");
    if (headerBytes > size - 8)
        fail(PSK_ERROR_BAD_FILE, "safetensors: file truncated: the header claims ", headerBytes,
             " bytes but only ", size - 8, " follow the length field");
    const uint8_t* buffer = bytes + 8 + headerBytes;
    const uint64_t bufferBytes = size - 8 - headerBytes;

    const JsonValue root = JsonParser(bytes + 8, size_t(headerBytes)).parseDocument();
    if (root.type != JsonValue::Type::Object)
        fail(PSK_ERROR_BAD_FILE, "safetensors: the header must be a JSON object, not ", typeName(root.type));

    SafeTensors result;
    for (const auto& [name, entry] : root.members) {
        if (name == "__metadata__") {
            if (entry.type != JsonValue::Type::Object)
                fail(PSK_ERROR_BAD_FILE, "safetensors: __metadata__ must be an object, not ", typeName(entry.type));
            for (const auto& [key, value] : entry.members) {
                if (value.type != JsonValue::Type::String)
                    fail(PSK_ERROR_BAD_FILE, "safetensors: __metadata__ value \"", key, "\" must be a string, not ",
                         typeName(value.type));
                result.metadata[key] = value.string;
            }
            continue;
        }
        const std::string where = cat("tensor \"", name, "\"");
        if (entry.type != JsonValue::Type::Object)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " must be an object, not ", typeName(entry.type));
        const JsonValue* dtype = nullptr;
        const JsonValue* shape = nullptr;
        const JsonValue* offsets = nullptr;
        for (const auto& [key, value] : entry.members) {
            if (key == "dtype")
                dtype = &value;
            else if (key == "shape")
                shape = &value;
            else if (key == "data_offsets")
                offsets = &value;
            else
                fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has an unknown field \"", key, "\"");
        }
        if (!dtype || !shape || !offsets)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " lacks \"",
                 !dtype ? "dtype" : !shape ? "shape" : "data_offsets", "\"");

        if (dtype->type != JsonValue::Type::String)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, ": dtype must be a string");
        unsigned elementBytes;
        if (dtype->string == "F32")
            elementBytes = 4;
        else if (dtype->string == "F16" || dtype->string == "BF16")
            elementBytes = 2;
        else
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has dtype \"", dtype->string,
                 "\"; only F32, F16 and BF16 are supported");

        if (shape->type != JsonValue::Type::Array)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, ": shape must be an array");
        Tensor tensor;
        for (const JsonValue& dim : shape->items) {
            const uint64_t d = nonNegative(dim, where + " shape entry");
            if (d > std::numeric_limits<uint32_t>::max())
                fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has a dimension too large (", d, ")");
            tensor.shape.push_back(uint32_t(d));
        }
        // Element count, saturating: anything above 2^60 cannot match a real byte range anyway.
        uint64_t elements = 1;
        bool huge = false;
        for (const uint32_t d : tensor.shape) {
            if (d == 0) {
                elements = 0;
                huge = false;
                break;
            }
            if (elements > (uint64_t(1) << 60) / d) huge = true;
            if (!huge) elements *= d;
        }

        if (offsets->type != JsonValue::Type::Array || offsets->items.size() != 2)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, ": data_offsets must be an array [begin, end]");
        const uint64_t begin = nonNegative(offsets->items[0], where + " data_offsets");
        const uint64_t end = nonNegative(offsets->items[1], where + " data_offsets");
        if (begin > end)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has data_offsets [", begin, ", ", end,
                 "] with begin > end");
        if (end > bufferBytes)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has data_offsets [", begin, ", ", end,
                 "] beyond the data buffer of ", bufferBytes, " bytes (file truncated?)");
        if (huge || elements * elementBytes != end - begin)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has shape ", shapeString(tensor.shape), " of ",
                 dtype->string, " (", huge ? std::string("too many") : cat(elements * elementBytes),
                 " bytes) but data_offsets span ", end - begin, " bytes");

        const uint8_t* p = buffer + begin;
        tensor.data.resize(size_t(elements));
        for (size_t i = 0; i < tensor.data.size(); ++i) {
            if (elementBytes == 4) {
                const uint32_t bits = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 | uint32_t(p[4 * i + 2]) << 16 |
                                      uint32_t(p[4 * i + 3]) << 24;
                std::memcpy(&tensor.data[i], &bits, 4);
            } else {
                const uint16_t half = uint16_t(p[2 * i] | p[2 * i + 1] << 8);
                if (dtype->string == "F16") {
                    tensor.data[i] = halfToFloat(half);
                } else {
                    const uint32_t bits = uint32_t(half) << 16;
                    std::memcpy(&tensor.data[i], &bits, 4);
                }
            }
        }
        result.tensors.emplace(name, std::move(tensor));
    }
    return result;
}

SafeTensors readSafeTensors(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(PSK_ERROR_BAD_FILE, "cannot open \"", path, "\"");
    in.seekg(0, std::ios::end);
    const std::streamoff length = in.tellg();
    if (length < 0) fail(PSK_ERROR_BAD_FILE, "cannot read \"", path, "\"");
    in.seekg(0, std::ios::beg);
    std::vector<uint8_t> bytes(static_cast<size_t>(length));
    if (length > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), length))
        fail(PSK_ERROR_BAD_FILE, "cannot read \"", path, "\"");
    try {
        return parseSafeTensors(bytes.data(), bytes.size());
    } catch (const Error& e) {
        throw Error(e.code(), cat("\"", path, "\": ", e.what()));
    }
}

std::vector<uint8_t> serializeSafeTensors(const SafeTensors& file) {
    std::string header = "{";
    bool first = true;
    if (!file.metadata.empty()) {
        header += "\"__metadata__\":{";
        for (const auto& [key, value] : file.metadata) {
            if (!isValidUtf8(key) || !isValidUtf8(value))
                fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: metadata \"", key, "\" is not valid UTF-8");
            if (!first) header += ',';
            first = false;
            writeJsonString(header, key);
            header += ':';
            writeJsonString(header, value);
        }
        header += '}';
        first = false;
    }
    uint64_t offset = 0;
    for (const auto& [name, tensor] : file.tensors) {
        if (name == "__metadata__")
            fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: \"__metadata__\" cannot name a tensor");
        if (!isValidUtf8(name)) fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: tensor name is not valid UTF-8");
        uint64_t elements = 1;
        for (uint32_t d : tensor.shape) elements *= d;
        if (elements != tensor.data.size())
            fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: tensor \"", name, "\" has shape ",
                 shapeString(tensor.shape), " but ", tensor.data.size(), " values");
        if (!first) header += ',';
        first = false;
        writeJsonString(header, name);
        header += ":{\"dtype\":\"F32\",\"shape\":[";
        for (size_t i = 0; i < tensor.shape.size(); ++i) header += cat(i ? "," : "", tensor.shape[i]);
        header += cat("],\"data_offsets\":[", offset, ",", offset + 4 * elements, "]}");
        offset += 4 * elements;
    }
    header += '}';
    while (header.size() % 8 != 0) header += ' ';

    std::vector<uint8_t> bytes;
    bytes.reserve(8 + header.size() + size_t(offset));
    const uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) bytes.push_back(uint8_t(n >> (8 * i)));
    bytes.insert(bytes.end(), header.begin(), header.end());
    for (const auto& entry : file.tensors) {
        for (const float value : entry.second.data) {
            uint32_t bits;
            std::memcpy(&bits, &value, 4);
            for (int i = 0; i < 4; ++i) bytes.push_back(uint8_t(bits >> (8 * i)));
        }
    }
    return bytes;
}

void writeSafeTensors(const std::string& path, const SafeTensors& file) {
    const std::vector<uint8_t> bytes = serializeSafeTensors(file);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail(PSK_ERROR_BAD_FILE, "cannot create \"", path, "\"");
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    out.close();
    if (!out) fail(PSK_ERROR_BAD_FILE, "cannot write \"", path, "\"");
}

// =============================================================================================
// Sketch loaders
// =============================================================================================

namespace {

const std::string& requireMetadata(const SafeTensors& file, const char* key, const char* what) {
    const auto it = file.metadata.find(key);
    if (it == file.metadata.end())
        fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ lacks \"", key, "\"");
    return it->second;
}

uint32_t metadataUint(const SafeTensors& file, const char* key, const char* what) {
    const std::string& text = requireMetadata(file, key, what);
    uint64_t value = 0;
    bool ok = !text.empty() && text.size() <= 10;
    for (const char c : text) {
        if (c < '0' || c > '9') {
            ok = false;
            break;
        }
        value = value * 10 + uint64_t(c - '0');
    }
    if (!ok || value > std::numeric_limits<uint32_t>::max())
        fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ \"", key, "\" is \"", text,
             "\", not a non-negative integer");
    return uint32_t(value);
}

bool metadataScaling(const std::string& text, const char* what) {
    if (text == "unbiased") return false;
    if (text == "reference") return true;
    fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ \"scaling\" is \"", text,
         "\", expected \"unbiased\" or \"reference\"");
}

void requireKind(const SafeTensors& file, const char* expected, const char* what) {
    const std::string& kind = requireMetadata(file, "kind", what);
    if (kind != expected)
        fail(PSK_ERROR_BAD_FILE, what, " file: __metadata__ \"kind\" is \"", kind, "\", expected \"", expected,
             "\"");
}

/** Checks presence, shape and finiteness of one tensor; returns its data. */
const std::vector<float>& requireTensor(const SafeTensors& file, const std::string& name,
                                        const std::vector<uint32_t>& shape, const char* shapeMeaning,
                                        const char* what) {
    const auto it = file.tensors.find(name);
    if (it == file.tensors.end()) fail(PSK_ERROR_BAD_FILE, what, " file: missing tensor \"", name, "\"");
    const Tensor& tensor = it->second;
    if (tensor.shape != shape)
        fail(PSK_ERROR_BAD_FILE, what, " file: tensor \"", name, "\" has shape ", shapeString(tensor.shape),
             ", expected ", shapeString(shape), " (", shapeMeaning, ")");
    for (size_t i = 0; i < tensor.data.size(); ++i) {
        if (!std::isfinite(tensor.data[i]))
            fail(PSK_ERROR_BAD_FILE, what, " file: tensor \"", name, "\" holds a non-finite value at element ", i);
    }
    return tensor.data;
}

void rejectExtraTensors(const SafeTensors& file, const std::set<std::string>& expected, const std::string& what) {
    for (const auto& entry : file.tensors) {
        if (expected.count(entry.first) == 0)
            fail(PSK_ERROR_BAD_FILE, what, " file: unexpected tensor \"", entry.first, "\"");
    }
}

const char* const kLearnedParts[4] = {"ln.scale", "ln.bias", "dense1", "dense2"};

}  // namespace

RandomSketchWeights loadRandomSketch(const SafeTensors& file, uint32_t h, uint32_t r, uint32_t degree) {
    const char* what = "random sketch";
    if (h == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "loadRandomSketch: the head dim must be non-zero");
    requireKind(file, "random", what);
    const uint32_t fileDegree = metadataUint(file, "degree", what);
    if (!isSupportedSketchDegree(fileDegree))
        fail(PSK_ERROR_BAD_FILE, what, " file: degree ", fileDegree, " is not supported (2, 4 or 8)");
    if (degree != 0 && degree != fileDegree)
        fail(PSK_ERROR_BAD_FILE, what, " file: degree ", fileDegree, ", but degree ", degree, " was requested");
    const uint32_t fileR = metadataUint(file, "sketch_size", what);
    if (fileR == 0) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size is 0");
    if (fileR > (1u << 24)) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, " is implausibly large");
    if (r != 0 && fileDegree != 2 && r != fileR)
        fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, ", but sketch size ", r, " was requested");
    const bool referenceScaling = metadataScaling(requireMetadata(file, "scaling", what), what);

    RandomSketchWeights weights;
    weights.degree = fileDegree;
    weights.headDim = h;
    weights.sketchSize = (fileDegree == 2 && r != 0) ? r : fileR;
    weights.referenceScaling = referenceScaling;
    std::set<std::string> expected;
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(fileDegree, h, fileR)) {
        expected.insert(spec.name);
        weights.g[spec.name] =
            requireTensor(file, spec.name, {spec.rows, spec.cols}, spec.level == 1 ? "h x r" : "r x r", what);
    }
    rejectExtraTensors(file, expected, cat("degree-", fileDegree, " ", what));
    return weights;
}

LearnedSketchWeights loadLearnedSketch(const SafeTensors& file, uint32_t h, uint32_t r) {
    const char* what = "learned sketch";
    if (h == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "loadLearnedSketch: the head dim must be non-zero");
    requireKind(file, "learned", what);
    const uint32_t fileDegree = metadataUint(file, "degree", what);
    if (fileDegree != 4)
        fail(PSK_ERROR_BAD_FILE, what, " file: degree ", fileDegree, "; a learned sketch has degree 4");
    const uint32_t fileR = metadataUint(file, "sketch_size", what);
    if (fileR == 0) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size is 0");
    if (fileR > (1u << 24)) fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, " is implausibly large");
    if (r != 0 && r != fileR)
        fail(PSK_ERROR_BAD_FILE, what, " file: sketch_size ", fileR, ", but sketch size ", r, " was requested");
    const auto scaling = file.metadata.find("scaling");
    if (scaling != file.metadata.end()) (void)metadataScaling(scaling->second, what);

    LearnedSketchWeights weights;
    weights.degree = 4;
    weights.headDim = h;
    weights.sketchSize = fileR;
    std::set<std::string> expected;
    for (uint32_t branch = 0; branch < 2; ++branch) {
        for (uint32_t level = 0; level < 2; ++level) {
            LearnedFeedForward& ff = weights.ff[branch][level];
            const uint32_t in = level == 0 ? h : fileR;
            const char* inName = level == 0 ? "h" : "r";
            ff.inDim = in;
            const std::string names[4] = {learnedSketchTensorName(branch, level, kLearnedParts[0]),
                                          learnedSketchTensorName(branch, level, kLearnedParts[1]),
                                          learnedSketchTensorName(branch, level, kLearnedParts[2]),
                                          learnedSketchTensorName(branch, level, kLearnedParts[3])};
            for (const std::string& name : names) expected.insert(name);
            ff.lnScale = requireTensor(file, names[0], {in}, inName, what);
            ff.lnBias = requireTensor(file, names[1], {in}, inName, what);
            ff.dense1 = requireTensor(file, names[2], {in, 8 * fileR}, level == 0 ? "h x 8r" : "r x 8r", what);
            ff.dense2 = requireTensor(file, names[3], {8 * fileR, fileR}, "8r x r", what);
        }
    }
    rejectExtraTensors(file, expected, what);
    return weights;
}

QkNormWeights loadQkNorm(const SafeTensors& file, uint32_t h) {
    const char* what = "q/k LayerNorm";
    if (h == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "loadQkNorm: the head dim must be non-zero");
    QkNormWeights weights;
    weights.scale = requireTensor(file, "ln.scale", {h}, "h", what);
    weights.bias = requireTensor(file, "ln.bias", {h}, "h", what);
    std::set<std::string> expected{"ln.scale", "ln.bias"};
    const bool localScale = file.tensors.count("local_ln.scale") != 0;
    const bool localBias = file.tensors.count("local_ln.bias") != 0;
    if (localScale != localBias)
        fail(PSK_ERROR_BAD_FILE, what, " file: \"local_ln.scale\" and \"local_ln.bias\" come as a pair; only \"",
             localScale ? "local_ln.scale" : "local_ln.bias", "\" is present");
    if (localScale) {
        weights.localScale = requireTensor(file, "local_ln.scale", {h}, "h", what);
        weights.localBias = requireTensor(file, "local_ln.bias", {h}, "h", what);
        expected.insert({"local_ln.scale", "local_ln.bias"});
    }
    rejectExtraTensors(file, expected, what);
    return weights;
}

SafeTensors qkNormToSafeTensors(const QkNormWeights& weights) {
    SafeTensors file;
    const uint32_t h = static_cast<uint32_t>(weights.scale.size());
    if (h == 0 || weights.bias.size() != h || weights.localScale.size() != weights.localBias.size() ||
        (weights.hasLocal() && weights.localScale.size() != h))
        fail(PSK_ERROR_INVALID_ARGUMENT, "q/k LayerNorm: scale and bias must have the same non-zero length");
    file.metadata["kind"] = "qk_norm";
    file.tensors["ln.scale"] = Tensor{{h}, weights.scale};
    file.tensors["ln.bias"] = Tensor{{h}, weights.bias};
    if (weights.hasLocal()) {
        file.tensors["local_ln.scale"] = Tensor{{h}, weights.localScale};
        file.tensors["local_ln.bias"] = Tensor{{h}, weights.localBias};
    }
    return file;
}

SafeTensors randomSketchToSafeTensors(const RandomSketchWeights& weights) {
    SafeTensors file;
    file.metadata["kind"] = "random";
    file.metadata["degree"] = cat(weights.degree);
    file.metadata["sketch_size"] = cat(weights.sketchSize);
    file.metadata["scaling"] = weights.referenceScaling ? "reference" : "unbiased";
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(weights.degree, weights.headDim, weights.sketchSize)) {
        const auto it = weights.g.find(spec.name);
        if (it == weights.g.end() || it->second.size() != size_t(spec.rows) * spec.cols)
            fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: tensor \"", spec.name, "\" is missing or not ",
                 spec.rows, " x ", spec.cols);
        file.tensors[spec.name] = Tensor{{spec.rows, spec.cols}, it->second};
    }
    return file;
}

SafeTensors learnedSketchToSafeTensors(const LearnedSketchWeights& weights) {
    SafeTensors file;
    const uint32_t r = weights.sketchSize;
    file.metadata["kind"] = "learned";
    file.metadata["degree"] = "4";
    file.metadata["sketch_size"] = cat(r);
    for (uint32_t branch = 0; branch < 2; ++branch) {
        for (uint32_t level = 0; level < 2; ++level) {
            const LearnedFeedForward& ff = weights.ff[branch][level];
            const uint32_t in = level == 0 ? weights.headDim : r;
            const std::pair<std::vector<uint32_t>, const std::vector<float>*> parts[4] = {
                {{in}, &ff.lnScale}, {{in}, &ff.lnBias}, {{in, 8 * r}, &ff.dense1}, {{8 * r, r}, &ff.dense2}};
            for (int p = 0; p < 4; ++p) {
                const std::string name = learnedSketchTensorName(branch, level, kLearnedParts[p]);
                uint64_t elements = 1;
                for (uint32_t d : parts[p].first) elements *= d;
                if (parts[p].second->size() != elements)
                    fail(PSK_ERROR_INVALID_ARGUMENT, "learned sketch: tensor \"", name, "\" should have shape ",
                         shapeString(parts[p].first), " but has ", parts[p].second->size(), " values");
                file.tensors[name] = Tensor{parts[p].first, *parts[p].second};
            }
        }
    }
    return file;
}

}  // namespace psk
