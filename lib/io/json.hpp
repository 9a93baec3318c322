// The one strict JSON parser (RFC 8259) of the project, with the UTF-8 check and the two writer
// helpers. The library reads safetensors headers with it (lib/io/safetensors.cpp, in a stricter
// dialect: integers only, no true/false/null, unique keys); the psk tool reads the PyTorch peer's
// results and writes its bench files with it (tools/psk, which compiles this same source file, as
// the shared library's copy is hidden). Self-contained on purpose (no psk::Error, no Vulkan): errors
// are ParseError, and each caller words them for its own context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace psk::json {

/** A syntax error: `reason` says what, `offset` is the byte where it was found. */
struct ParseError : std::runtime_error {
    ParseError(const std::string& reason, size_t offset);
    std::string reason;
    size_t offset;
};

struct Value {
    enum class Type { Null, Bool, Number, String, Array, Object };
    Type type = Type::Null;
    bool boolean = false;
    double number = 0;  // every number, as strtod reads its text
    /**
     * A number written without fraction or exponent whose magnitude is below 2^64 (always so in
     * the integersOnly dialect) is also held exactly: (negative ? -magnitude : magnitude).
     */
    bool integer = false;
    bool negative = false;
    uint64_t magnitude = 0;
    std::string string;  // UTF-8, escapes decoded
    std::vector<Value> array;
    std::vector<std::pair<std::string, Value>> object;  // in file order

    bool isNull() const { return type == Type::Null; }
    /** The member named `key` (the first one, should a key repeat), or nullptr (also when this is not an object). */
    const Value* find(const std::string& key) const;
    /** Member accessors with defaults for a missing member or a different type. */
    double num(const std::string& key, double fallback = 0) const;
    std::string str(const std::string& key, const std::string& fallback = "") const;
    bool flag(const std::string& key, bool fallback = false) const;
};

/** Restrictions on top of RFC 8259 (the default: none), for formats that allow less. */
struct Dialect {
    /** Numbers must be integers (no fraction, no exponent) below 2^64 in magnitude. */
    bool integersOnly = false;
    /** true, false and null are errors. */
    bool noLiterals = false;
    /** An object naming a key twice is an error (RFC 8259 only says SHOULD be unique). */
    bool uniqueKeys = false;
    /** How error reasons name the document ("expected a value, found the end of the document"). */
    const char* name = "document";
};

/**
 * Parses a whole document: one value, surrounding whitespace allowed. Strings must be well-formed
 * UTF-8 (see isValidUtf8), nesting at most 64 deep. Throws ParseError.
 */
Value parse(std::string_view text, const Dialect& dialect = {});

/**
 * Whether `s` is well-formed UTF-8: no bad or truncated sequence, no overlong form, no surrogate,
 * nothing past U+10FFFF.
 */
bool isValidUtf8(std::string_view s);

/** A JSON string literal for `s` (quotes included; '"', '\\' and control characters escaped). */
std::string quote(const std::string& s);
/** A JSON number for `v` ("null" when not finite), with up to `digits` significant digits. */
std::string number(double v, int digits = 9);

}  // namespace psk::json
