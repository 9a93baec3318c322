#include "npy.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>

namespace psk::npy {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;

[[noreturn]] void fail(const std::string& message) { throw Error(message); }

}  // namespace

namespace {

// Parser of the header dictionary, a Python literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
class HeaderParser {
public:
    explicit HeaderParser(std::string text) : s_(std::move(text)) {}

    void parse(std::string& descr, bool& fortran, std::vector<uint64_t>& shape) {
        bool haveDescr = false, haveFortran = false, haveShape = false;
        skipSpace();
        expect('{');
        for (;;) {
            skipSpace();
            if (peek() == '}') {
                ++i_;
                break;
            }
            const std::string key = parseString("a key");
            skipSpace();
            expect(':');
            skipSpace();
            if (key == "descr") {
                if (haveDescr) fail("the header repeats 'descr'");
                if (peek() == '[') fail("structured dtypes are not supported (only '<f4' and '<f2')");
                descr = parseString("the 'descr' value");
                haveDescr = true;
            } else if (key == "fortran_order") {
                if (haveFortran) fail("the header repeats 'fortran_order'");
                fortran = parseBool();
                haveFortran = true;
            } else if (key == "shape") {
                if (haveShape) fail("the header repeats 'shape'");
                shape = parseShape();
                haveShape = true;
            } else {
                fail("unexpected key '" + key + "' in the header");
            }
            skipSpace();
            if (peek() == ',') {
                ++i_;
                continue;
            }
            if (peek() == '}') {
                ++i_;
                break;
            }
            fail("malformed header: expected ',' or '}' at offset " + std::to_string(i_));
        }
        skipSpace();
        if (i_ != s_.size()) fail("malformed header: text after the dictionary");
        if (!haveDescr) fail("the header lacks 'descr'");
        if (!haveFortran) fail("the header lacks 'fortran_order'");
        if (!haveShape) fail("the header lacks 'shape'");
    }

private:
    char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
    void skipSpace() {
        while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
    }
    void expect(char c) {
        if (peek() != c) fail(std::string("malformed header: expected '") + c + "' at offset " + std::to_string(i_));
        ++i_;
    }
    std::string parseString(const char* what) {
        const char q = peek();
        if (q != '\'' && q != '"') fail(std::string("malformed header: expected a string for ") + what);
        ++i_;
        const size_t start = i_;
        while (i_ < s_.size() && s_[i_] != q) {
            if (s_[i_] == '\\') fail("malformed header: escapes in strings are not supported");
            ++i_;
        }
        if (i_ >= s_.size()) fail("malformed header: unterminated string");
        return s_.substr(start, i_++ - start);
    }
    bool parseBool() {
        if (s_.compare(i_, 4, "True") == 0) {
            i_ += 4;
            return true;
        }
        if (s_.compare(i_, 5, "False") == 0) {
            i_ += 5;
            return false;
        }
        fail("malformed header: 'fortran_order' must be True or False");
    }
    std::vector<uint64_t> parseShape() {
        std::vector<uint64_t> shape;
        bool trailingComma = false;
        expect('(');
        for (;;) {
            skipSpace();
            if (peek() == ')') {
                ++i_;
                break;
            }
            if (peek() < '0' || peek() > '9') fail("malformed header: 'shape' must be a tuple of non-negative integers");
            uint64_t v = 0;
            while (peek() >= '0' && peek() <= '9') {
                const uint64_t d = uint64_t(peek() - '0');
                if (v > (std::numeric_limits<uint64_t>::max() - d) / 10) fail("a dimension of 'shape' is too large");
                v = v * 10 + d;
                ++i_;
            }
            if (peek() == 'L') ++i_;  // Python 2 long literals in old files
            shape.push_back(v);
            trailingComma = false;
            skipSpace();
            if (peek() == ',') {
                ++i_;
                trailingComma = true;
                continue;
            }
            if (peek() == ')') {
                ++i_;
                break;
            }
            fail("malformed header: expected ',' or ')' in 'shape'");
        }
        // "(3)" is an int in Python, not a tuple; NumPy always writes "(3,)".
        if (shape.size() == 1 && !trailingComma) fail("malformed header: a 1-d 'shape' must be written (n,)");
        return shape;
    }

    std::string s_;
    size_t i_ = 0;
};

uint32_t readLe(const uint8_t* p, int bytes) {
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

}  // namespace

const char* descr(DType t) { return t == DType::Float32 ? "<f4" : "<f2"; }

uint64_t Array::count() const {
    uint64_t c = 1;
    for (uint64_t d : shape) c *= d;
    return c;
}

std::vector<float> Array::toFloat() const {
    const size_t n = static_cast<size_t>(count());
    std::vector<float> out(n);
    if (dtype == DType::Float32) {
        // The host is little-endian (x86-64, ARM64). No copy of an empty array: its data() may be
        // null, and memcpy's pointers must not be, whatever the size.
        if (n) std::memcpy(out.data(), data.data(), n * 4);
    } else {
        for (size_t i = 0; i < n; ++i) out[i] = halfToFloat(uint16_t(data[2 * i] | (data[2 * i + 1] << 8)));
    }
    return out;
}

std::string Array::shapeString() const {
    std::ostringstream s;
    s << '(';
    for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
    if (shape.size() == 1) s << ',';
    s << ')';
    return s.str();
}

Array parse(const uint8_t* bytes, size_t size) {
    if (size < kMagicLen + 2 || std::memcmp(bytes, kMagic, kMagicLen) != 0) {
        if (size < kMagicLen + 2 && (size == 0 || std::memcmp(bytes, kMagic, std::min(size, kMagicLen)) == 0))
            fail("not a .npy file (too short for the header)");
        fail("not a .npy file (bad magic string)");
    }
    const int major = bytes[6], minor = bytes[7];
    if ((major != 1 && major != 2 && major != 3) || minor != 0)
        fail("unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
             " (1.0, 2.0 and 3.0 are read)");
    const size_t lenBytes = major == 1 ? 2 : 4;
    if (size < kMagicLen + 2 + lenBytes) fail("truncated header");
    const uint64_t headerLen = readLe(bytes + 8, int(lenBytes));
    const uint64_t dataStart = kMagicLen + 2 + lenBytes + headerLen;
    if (dataStart > size) fail("truncated header: it claims " + std::to_string(headerLen) + " bytes, the file is " + std::to_string(size));
    std::string header(reinterpret_cast<const char*>(bytes) + kMagicLen + 2 + lenBytes, static_cast<size_t>(headerLen));
    if (header.find('\0') != std::string::npos) fail("malformed header: it contains a NUL byte");

    std::string d;
    bool fortran = false;
    Array a;
    HeaderParser(header).parse(d, fortran, a.shape);
    if (d == "<f4") {
        a.dtype = DType::Float32;
    } else if (d == "<f2") {
        a.dtype = DType::Float16;
    } else if (d == ">f4" || d == ">f2") {
        fail("big-endian data ('" + d + "') is not supported; save it little-endian ('<" + d.substr(1) + "')");
    } else {
        fail("dtype '" + d + "' is not supported (only little-endian float32 '<f4' and float16 '<f2')");
    }
    if (fortran) fail("Fortran-order arrays are not supported; save the array in C order");

    uint64_t count = 1;
    for (uint64_t dim : a.shape) {
        if (dim && count > std::numeric_limits<uint64_t>::max() / 16 / dim) fail("the shape " + a.shapeString() + " is too large");
        count *= dim;
    }
    const uint64_t need = count * itemSize(a.dtype), have = size - dataStart;
    if (have < need)
        fail("truncated data: the shape " + a.shapeString() + " needs " + std::to_string(need) + " bytes, the file has " +
             std::to_string(have));
    if (have > need)
        fail(std::to_string(have - need) + " unexpected bytes after the data of shape " + a.shapeString());
    a.data.assign(bytes + dataStart, bytes + dataStart + need);
    return a;
}

Array read(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) fail(std::string("cannot open: ") + std::strerror(errno));
    std::vector<uint8_t> bytes;
    uint8_t buf[1 << 16];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + got);
    const bool bad = std::ferror(f);
    std::fclose(f);
    if (bad) fail("read error");
    return parse(bytes.data(), bytes.size());
}

std::vector<uint8_t> serialize(const std::vector<uint64_t>& shape, DType dtype, const void* data, size_t dataBytes) {
    Array probe;
    probe.shape = shape;
    if (probe.count() * itemSize(dtype) != dataBytes)
        fail("serialize: " + std::to_string(dataBytes) + " bytes do not match the shape " + probe.shapeString());
    std::string header = std::string("{'descr': '") + descr(dtype) + "', 'fortran_order': False, 'shape': " + probe.shapeString() + ", }";
    // Pad with spaces and end with '\n' so that the data starts at a multiple of 64 bytes. Version
    // 1.0 stores the header length in 2 bytes; a longer header needs version 2.0 (4 bytes).
    auto padded = [&](size_t prefix) { return (prefix + header.size() + 1 + 63) / 64 * 64; };
    size_t prefix = kMagicLen + 2 + 2;
    if (padded(prefix) - prefix > 65535) prefix = kMagicLen + 2 + 4;
    const size_t total = padded(prefix);
    header.append(total - prefix - header.size() - 1, ' ');
    header.push_back('\n');
    const bool v2 = prefix == kMagicLen + 2 + 4;
    const uint32_t len = static_cast<uint32_t>(header.size());
    std::vector<uint8_t> out(total + dataBytes);
    std::memcpy(out.data(), kMagic, kMagicLen);
    out[kMagicLen] = v2 ? 2 : 1;
    out[kMagicLen + 1] = 0;
    for (size_t i = 0; i < (v2 ? 4u : 2u); ++i) out[kMagicLen + 2 + i] = static_cast<uint8_t>(len >> (8 * i));
    std::memcpy(out.data() + prefix, header.data(), header.size());
    if (dataBytes) std::memcpy(out.data() + total, data, dataBytes);
    return out;
}

void write(const std::string& path, const std::vector<uint64_t>& shape, const std::vector<float>& values, DType dtype) {
    std::vector<uint8_t> raw;
    if (dtype == DType::Float32) {
        raw.resize(values.size() * 4);
        if (!raw.empty()) std::memcpy(raw.data(), values.data(), raw.size());  // not with null pointers (empty)
    } else {
        raw.resize(values.size() * 2);
        for (size_t i = 0; i < values.size(); ++i) {
            const uint16_t h = floatToHalf(values[i]);
            raw[2 * i] = static_cast<uint8_t>(h);
            raw[2 * i + 1] = static_cast<uint8_t>(h >> 8);
        }
    }
    writeFile(path, serialize(shape, dtype, raw.data(), raw.size()));
}

void writeFile(const std::string& path, const std::vector<uint8_t>& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot create " + path + ": " + std::strerror(errno));
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed) {
        std::remove(path.c_str());
        fail("cannot write " + path);
    }
}

}  // namespace psk::npy
