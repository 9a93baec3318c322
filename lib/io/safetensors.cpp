// safetensors reading and writing (see safetensors.hpp): the file layout, the checks of every
// header entry against the data buffer, and the conversion of F16/BF16 to float.
#include "io/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <utility>

#include "io/json.hpp"
#include "util/error.hpp"
#include "util/float16.hpp"

namespace psk {

namespace {

using json::Value;

// The header's dialect: tensor entries hold only strings and integers (offsets and dimensions up
// to 2^64 - 1, read exactly), and a repeated tensor name or field would be ambiguous.
json::Dialect headerDialect() {
    json::Dialect dialect;
    dialect.integersOnly = true;
    dialect.noLiterals = true;
    dialect.uniqueKeys = true;
    dialect.name = "header";
    return dialect;
}

const char* typeName(Value::Type type) {
    switch (type) {
        case Value::Type::Object:
            return "an object";
        case Value::Type::Array:
            return "an array";
        case Value::Type::String:
            return "a string";
        case Value::Type::Number:
            return "an integer";  // the header's dialect has no other numbers
        default:
            return "a literal";  // not reached: the header's dialect rejects true, false and null
    }
}

uint64_t readLe64(const uint8_t* p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
}

uint64_t nonNegative(const Value& value, const std::string& what) {
    if (value.type != Value::Type::Number)
        fail(PSK_ERROR_BAD_FILE, "safetensors: ", what, " must be an integer, not ", typeName(value.type));
    if (value.negative && value.magnitude != 0)
        fail(PSK_ERROR_BAD_FILE, "safetensors: ", what, " is negative (-", value.magnitude, ")");
    return value.magnitude;
}

// The reference implementation's limit (MAX_HEADER_SIZE = 100_000_000 in safetensors/src/tensor.rs
// of huggingface/safetensors: HeaderTooLarge): 100 MB, checked before the header is read.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;

}  // namespace

std::string shapeString(const std::vector<uint32_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += cat(i ? ", " : "", shape[i]);
    return s + "]";
}

namespace {

/** One tensor entry of the header, checked against the data buffer; its data not yet read. */
struct Entry {
    std::string name;
    Tensor tensor;  // the shape; data sized to the element count
    bool f16 = false, bf16 = false;
    unsigned elementBytes = 4;
    uint64_t begin = 0, end = 0;  // in the data buffer
};

struct Header {
    std::vector<Entry> entries;
    std::map<std::string, std::string> metadata;
};

/** Checks the 8-byte header length of a file of `size` bytes: at most kMaxHeaderBytes, inside the file. */
void checkHeaderLength(uint64_t headerBytes, uint64_t size) {
    if (headerBytes > kMaxHeaderBytes)
        fail(PSK_ERROR_BAD_FILE, "safetensors: header length ", headerBytes, " exceeds the limit of ",
             kMaxHeaderBytes, " bytes (not a safetensors file?)");
    if (headerBytes > size - 8)
        fail(PSK_ERROR_BAD_FILE, "safetensors: file truncated: the header claims ", headerBytes,
             " bytes but only ", size - 8, " follow the length field");
}

/**
 * Parses the header JSON and checks every entry against a data buffer of `bufferBytes` bytes:
 * dtype, shape, data_offsets inside the buffer and matching the shape, no two tensors sharing a
 * byte.
 */
Header parseHeader(std::string_view text, uint64_t bufferBytes) {
    Value root;
    try {
        root = json::parse(text, headerDialect());
    } catch (const json::ParseError& e) {
        fail(PSK_ERROR_BAD_FILE, "safetensors header is not valid JSON: ", e.reason, " (at byte ", e.offset,
             " of the header)");
    }
    if (root.type != Value::Type::Object)
        fail(PSK_ERROR_BAD_FILE, "safetensors: the header must be a JSON object, not ", typeName(root.type));

    Header result;
    for (const auto& [name, entry] : root.object) {
        if (name == "__metadata__") {
            if (entry.type != Value::Type::Object)
                fail(PSK_ERROR_BAD_FILE, "safetensors: __metadata__ must be an object, not ", typeName(entry.type));
            for (const auto& [key, value] : entry.object) {
                if (value.type != Value::Type::String)
                    fail(PSK_ERROR_BAD_FILE, "safetensors: __metadata__ value \"", key, "\" must be a string, not ",
                         typeName(value.type));
                result.metadata[key] = value.string;
            }
            continue;
        }
        const std::string where = cat("tensor \"", name, "\"");
        if (entry.type != Value::Type::Object)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " must be an object, not ", typeName(entry.type));
        const Value* dtype = nullptr;
        const Value* shape = nullptr;
        const Value* offsets = nullptr;
        for (const auto& [key, value] : entry.object) {
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

        Entry e;
        e.name = name;
        if (dtype->type != Value::Type::String)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, ": dtype must be a string");
        if (dtype->string == "F32")
            e.elementBytes = 4;
        else if (dtype->string == "F16" || dtype->string == "BF16")
            e.elementBytes = 2;
        else
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has dtype \"", dtype->string,
                 "\"; only F32, F16 and BF16 are supported");
        e.f16 = dtype->string == "F16";
        e.bf16 = dtype->string == "BF16";

        if (shape->type != Value::Type::Array)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, ": shape must be an array");
        for (const Value& dim : shape->array) {
            const uint64_t d = nonNegative(dim, where + " shape entry");
            if (d > std::numeric_limits<uint32_t>::max())
                fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has a dimension too large (", d, ")");
            e.tensor.shape.push_back(uint32_t(d));
        }
        // Element count, saturating: anything above 2^60 cannot match a real byte range anyway.
        uint64_t elements = 1;
        bool huge = false;
        for (const uint32_t d : e.tensor.shape) {
            if (d == 0) {
                elements = 0;
                huge = false;
                break;
            }
            if (elements > (uint64_t(1) << 60) / d) huge = true;
            if (!huge) elements *= d;
        }

        if (offsets->type != Value::Type::Array || offsets->array.size() != 2)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, ": data_offsets must be an array [begin, end]");
        e.begin = nonNegative(offsets->array[0], where + " data_offsets");
        e.end = nonNegative(offsets->array[1], where + " data_offsets");
        if (e.begin > e.end)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has data_offsets [", e.begin, ", ", e.end,
                 "] with begin > end");
        if (e.end > bufferBytes)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has data_offsets [", e.begin, ", ", e.end,
                 "] beyond the data buffer of ", bufferBytes, " bytes (file truncated?)");
        if (huge || elements * e.elementBytes != e.end - e.begin)
            fail(PSK_ERROR_BAD_FILE, "safetensors: ", where, " has shape ", shapeString(e.tensor.shape), " of ",
                 dtype->string, " (", huge ? std::string("too many") : cat(elements * e.elementBytes),
                 " bytes) but data_offsets span ", e.end - e.begin, " bytes");
        e.tensor.data.resize(size_t(elements));  // at most the buffer's size: checked above
        result.entries.push_back(std::move(e));
    }

    // No byte of the buffer belongs to two tensors (the format's guarantee, README of
    // huggingface/safetensors; its reader requires back-to-back tensors). Empty tensors hold no
    // byte. Sorted by begin, a tensor overlapping any earlier one overlaps its predecessor.
    std::vector<const Entry*> ranges;
    for (const Entry& e : result.entries)
        if (e.end > e.begin) ranges.push_back(&e);
    std::sort(ranges.begin(), ranges.end(), [](const Entry* a, const Entry* b) {
        return a->begin != b->begin ? a->begin < b->begin : a->name < b->name;
    });
    for (size_t i = 1; i < ranges.size(); ++i)
        if (ranges[i]->begin < ranges[i - 1]->end)
            fail(PSK_ERROR_BAD_FILE, "safetensors: tensors \"", ranges[i - 1]->name, "\" [", ranges[i - 1]->begin, ", ",
                 ranges[i - 1]->end, ") and \"", ranges[i]->name, "\" [", ranges[i]->begin, ", ", ranges[i]->end,
                 ") overlap: a byte of the data buffer may belong to one tensor only");
    return result;
}

/** Converts an entry's bytes (end - begin of them, little endian) into its float data. */
void decodeTensor(Entry& e, const uint8_t* p) {
    for (size_t i = 0; i < e.tensor.data.size(); ++i) {
        if (e.elementBytes == 4) {
            const uint32_t bits = uint32_t(p[4 * i]) | uint32_t(p[4 * i + 1]) << 8 | uint32_t(p[4 * i + 2]) << 16 |
                                  uint32_t(p[4 * i + 3]) << 24;
            std::memcpy(&e.tensor.data[i], &bits, 4);
        } else {
            const uint16_t half = uint16_t(p[2 * i] | p[2 * i + 1] << 8);
            if (e.f16) {
                e.tensor.data[i] = halfToFloat(half);
            } else {
                const uint32_t bits = uint32_t(half) << 16;
                std::memcpy(&e.tensor.data[i], &bits, 4);
            }
        }
    }
}

SafeTensors assemble(Header&& header) {
    SafeTensors result;
    result.metadata = std::move(header.metadata);
    for (Entry& e : header.entries) result.tensors.emplace(e.name, std::move(e.tensor));
    return result;
}

}  // namespace

SafeTensors parseSafeTensors(const uint8_t* bytes, size_t size) {
    if (size < 8)
        fail(PSK_ERROR_BAD_FILE, "safetensors: file truncated: ", size,
             " bytes, fewer than the 8-byte header length");
    const uint64_t headerBytes = readLe64(bytes);
    checkHeaderLength(headerBytes, size);
    const uint8_t* buffer = bytes + 8 + headerBytes;
    Header header = parseHeader(std::string_view(reinterpret_cast<const char*>(bytes + 8), size_t(headerBytes)),
                                size - 8 - headerBytes);
    for (Entry& e : header.entries) decodeTensor(e, buffer + e.begin);
    return assemble(std::move(header));
}

SafeTensors readSafeTensors(const std::string& path, const std::string& prefix) {
    // The file's size from the file system, not from the stream (a directory opens as a stream on
    // Linux and reports a size of 2^63 - 1); then the length field, the header (at most
    // kMaxHeaderBytes) and each tensor's bytes, read where the header says: memory is the header
    // plus the tensors, never the file.
    std::error_code ec;
    const std::filesystem::file_status status = std::filesystem::status(path, ec);
    if (ec || !std::filesystem::exists(status)) fail(PSK_ERROR_BAD_FILE, "cannot open \"", path, "\"");
    if (!std::filesystem::is_regular_file(status))
        fail(PSK_ERROR_BAD_FILE, "\"", path, "\" is not a regular file");
    const uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) fail(PSK_ERROR_BAD_FILE, "cannot read \"", path, "\"");
    std::ifstream in(path, std::ios::binary);
    if (!in) fail(PSK_ERROR_BAD_FILE, "cannot open \"", path, "\"");
    auto readAt = [&](uint64_t offset, void* dst, uint64_t bytes) {
        if (!bytes) return;
        in.seekg(std::streamoff(offset));
        if (!in.read(static_cast<char*>(dst), std::streamsize(bytes)))
            fail(PSK_ERROR_BAD_FILE, "cannot read ", bytes, " bytes at offset ", offset, " (did the file change?)");
    };
    try {
        if (size < 8)
            fail(PSK_ERROR_BAD_FILE, "safetensors: file truncated: ", size, " bytes, fewer than the 8-byte header length");
        uint8_t length[8];
        readAt(0, length, 8);
        const uint64_t headerBytes = readLe64(length);
        checkHeaderLength(headerBytes, size);
        std::string text(size_t(headerBytes), '\0');
        readAt(8, text.data(), headerBytes);
        Header header = parseHeader(text, size - 8 - headerBytes);
        // Only the tensors under `prefix` are read (the whole header was still validated), renamed
        // without it: one model file holds every layer's weights.
        if (!prefix.empty()) {
            std::vector<Entry> kept;
            for (Entry& e : header.entries)
                if (e.name.size() > prefix.size() && e.name.compare(0, prefix.size(), prefix) == 0) {
                    e.name.erase(0, prefix.size());
                    kept.push_back(std::move(e));
                }
            header.entries = std::move(kept);
        }
        std::vector<uint8_t> bytes;
        for (Entry& e : header.entries) {
            bytes.resize(size_t(e.end - e.begin));
            readAt(8 + headerBytes + e.begin, bytes.data(), bytes.size());
            decodeTensor(e, bytes.data());
        }
        return assemble(std::move(header));
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
            if (!json::isValidUtf8(key) || !json::isValidUtf8(value))
                fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: metadata \"", key, "\" is not valid UTF-8");
            if (!first) header += ',';
            first = false;
            header += json::quote(key);
            header += ':';
            header += json::quote(value);
        }
        header += '}';
        first = false;
    }
    uint64_t offset = 0;
    for (const auto& [name, tensor] : file.tensors) {
        if (name == "__metadata__")
            fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: \"__metadata__\" cannot name a tensor");
        if (!json::isValidUtf8(name)) fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: tensor name is not valid UTF-8");
        uint64_t elements = 1;
        for (uint32_t d : tensor.shape) elements *= d;
        if (elements != tensor.data.size())
            fail(PSK_ERROR_INVALID_ARGUMENT, "safetensors: tensor \"", name, "\" has shape ",
                 shapeString(tensor.shape), " but ", tensor.data.size(), " values");
        if (!first) header += ',';
        first = false;
        header += json::quote(name);
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

}  // namespace psk
