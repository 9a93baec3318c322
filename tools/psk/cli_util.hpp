// Small helpers shared by the psk commands: names of kinds and storage types, number parsing, UTC time,
// and a message sink that keeps the library's last ERROR message for the one-line report.
#pragma once

#include <polysketch/polysketch.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

namespace psk::cli {

/** The current UTC time as ISO 8601, e.g. "2026-11-27T00:45:00Z" (the records' timestamps). */
inline std::string utcNow() {
    const std::time_t t = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
    return text;
}

/** A bad command line: the one-line message psk prints before exiting with status 2. */
struct UsageError {
    std::string message;
};

/**
 * Walks a command line option by option. "--name=value" and "--name value" both work: value()
 * returns the inline value or consumes the next argument; flag() refuses an inline value.
 */
class ArgReader {
public:
    ArgReader(int argc, char** argv) : argc_(argc), argv_(argv) {}
    /** Moves to the next argument; false at the end. */
    bool next() {
        if (++i_ >= argc_) return false;
        raw_ = argv_[i_];
        name_ = raw_;
        inline_ = false;
        const size_t eq = raw_.find('=');
        if (raw_.rfind("--", 0) == 0 && eq != std::string::npos) {
            value_ = raw_.substr(eq + 1);
            name_ = raw_.substr(0, eq);
            inline_ = true;
        }
        return true;
    }
    /** The option's name, without any "=value". */
    const std::string& name() const { return name_; }
    /** The argument as written (for "unknown option" messages). */
    const std::string& raw() const { return raw_; }
    std::string value() {
        if (inline_) return value_;
        if (i_ + 1 >= argc_) throw UsageError{name_ + " needs a value"};
        return argv_[++i_];
    }
    void flag() const {
        if (inline_) throw UsageError{name_ + " takes no value"};
    }

private:
    int argc_;
    char** argv_;
    int i_ = -1;
    std::string raw_, name_, value_;
    bool inline_ = false;
};

inline bool parseKind(const std::string& s, PskAttentionKind* out) {
    if (s == "softmax") *out = PSK_ATTENTION_KIND_SOFTMAX;
    else if (s == "poly" || s == "polynomial") *out = PSK_ATTENTION_KIND_POLYNOMIAL;
    else if (s == "polysketch") *out = PSK_ATTENTION_KIND_POLYSKETCH;
    else return false;
    return true;
}

inline const char* kindName(PskAttentionKind k) {
    switch (k) {
        case PSK_ATTENTION_KIND_SOFTMAX: return "softmax";
        case PSK_ATTENTION_KIND_POLYNOMIAL: return "poly";
        case PSK_ATTENTION_KIND_POLYSKETCH: return "polysketch";
        default: return "none";
    }
}

inline bool parseDataType(const std::string& s, PskDataType* out) {
    if (s == "f32") *out = PSK_DATA_TYPE_FLOAT32;
    else if (s == "f16") *out = PSK_DATA_TYPE_FLOAT16;
    else if (s == "bf16") *out = PSK_DATA_TYPE_BFLOAT16;
    else return false;
    return true;
}

inline const char* dataTypeName(PskDataType t) {
    return t == PSK_DATA_TYPE_FLOAT16 ? "f16" : t == PSK_DATA_TYPE_BFLOAT16 ? "bf16" : "f32";
}

inline bool parseLayout(const std::string& s, PskLayout* out) {
    if (s == "bhnd") *out = PSK_LAYOUT_BHND;
    else if (s == "bnhd") *out = PSK_LAYOUT_BNHD;
    else return false;
    return true;
}

inline const char* layoutName(PskLayout l) { return l == PSK_LAYOUT_BNHD ? "bnhd" : "bhnd"; }

/** A decimal integer in [lo, hi]; an optional k suffix multiplies by 1024 ("4k" = 4096). */
inline bool parseUint(const std::string& s, uint64_t lo, uint64_t hi, uint64_t* out) {
    if (s.empty() || s[0] < '0' || s[0] > '9') return false;
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (errno) return false;
    if (*end == 'k' || *end == 'K') {
        if (v > (1ull << 40)) return false;
        v *= 1024;
        ++end;
    }
    if (*end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

inline bool parseUint32(const std::string& s, uint32_t lo, uint32_t hi, uint32_t* out) {
    uint64_t v = 0;
    if (!parseUint(s, lo, hi, &v)) return false;
    *out = static_cast<uint32_t>(v);
    return true;
}

/** A finite floating-point number. */
inline bool parseDouble(const std::string& s, double* out) {
    if (s.empty()) return false;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (*end || !std::isfinite(v)) return false;
    *out = v;
    return true;
}

/** Splits "a,b,c" at commas (empty items are kept, so that they can be reported). */
inline std::vector<std::string> splitList(const std::string& s) {
    std::vector<std::string> items;
    size_t start = 0;
    for (;;) {
        const size_t comma = s.find(',', start);
        items.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return items;
}

/**
 * Keeps the library's most recent ERROR message (install as the context's message callback) and
 * prints every validation-layer message (PSK_VALIDATION=1) to stderr as "psk: validation: ...".
 */
struct MessageSink {
    std::mutex mutex;
    std::string lastError;

    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) std::fprintf(stderr, "psk: validation: %s\n", message ? message : "");
        if (severity != PSK_MESSAGE_SEVERITY_ERROR || !user) return;
        auto* self = static_cast<MessageSink*>(user);
        std::lock_guard<std::mutex> lock(self->mutex);
        self->lastError = message ? message : "";
    }
    /** "PSK_ERROR_X: message" for a failed call, and forgets the message. */
    std::string describe(PskResult r) {
        std::lock_guard<std::mutex> lock(mutex);
        std::string s = pskResultToString(r);
        if (!lastError.empty()) s += ": " + lastError;
        lastError.clear();
        return s;
    }
};

}  // namespace psk::cli
