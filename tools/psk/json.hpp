// Minimal JSON for the psk tool: a strict parser (RFC 8259; used to read the PyTorch peer's results
// and, in the tests, psk bench's own output) and the two helpers the writers need.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace psk::json {

struct ParseError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

struct Value {
    enum class Type { Null, Bool, Number, String, Array, Object };
    Type type = Type::Null;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<Value> array;
    std::vector<std::pair<std::string, Value>> object;  // in file order

    bool isNull() const { return type == Type::Null; }
    /** The member named `key`, or nullptr (also when this is not an object). */
    const Value* find(const std::string& key) const;
    /** Member accessors with defaults for a missing member or a different type. */
    double num(const std::string& key, double fallback = 0) const;
    std::string str(const std::string& key, const std::string& fallback = "") const;
    bool flag(const std::string& key, bool fallback = false) const;
};

/** Parses a whole document (one value, surrounding whitespace allowed). Throws ParseError. */
Value parse(const std::string& text);

/** A JSON string literal for `s` (quotes included; control characters escaped). */
std::string quote(const std::string& s);
/** A JSON number for `v` ("null" when not finite), with up to `digits` significant digits. */
std::string number(double v, int digits = 9);

}  // namespace psk::json
