// The decode state blob's header (decode_blob.hpp): encoding and checks, byte for byte the format
// of version 3. Layout, little endian: magic (8 bytes), version (4), the 11 config fields (4 each),
// the sketch hash (8), B (4), capacity (4), then B positions (8 each), the data, and (version 3)
// the XXH64 checksum of all the bytes before it (8).
#include "decode/decode_blob.hpp"

#include <cstring>

#include "decode/softmax_decoder.hpp"
#include "forward/attention.hpp"
#include "util/error.hpp"
#include "util/xxh64.hpp"

namespace psk {

namespace {

// 2: local exact keeps the running block sum h, not S(k) rows. 3: the checksum trailer (version 2
// blobs, the same but for the trailer, are still read).
constexpr uint32_t kFormatVersion = 3;
constexpr uint32_t kOldestReadVersion = 2;
constexpr char kMagic[8] = {'P', 'S', 'K', 'D', 'E', 'C', 'S', 'T'};
// Byte offsets of the header's parts.
constexpr size_t kVersionAt = 8;
constexpr size_t kConfigAt = kVersionAt + 4;
constexpr size_t kHashAt = kConfigAt + DecodeBlobHeader::kConfigFields * 4;
constexpr size_t kBatchAt = kHashAt + 8;
constexpr size_t kCapacityAt = kBatchAt + 4;
constexpr size_t kHeaderBytes = kCapacityAt + 4;
static_assert(kHeaderBytes == 8 + 4 + 11 * 4 + 8 + 2 * 4, "the version 2 header is 72 bytes");

const char* const kConfigNames[DecodeBlobHeader::kConfigFields] = {
    "kind",          "degree",           "sketch size", "block size", "headDim", "valueDim",
    "numQueryHeads", "numKeyValueHeads", "flags (causal, local exact, reference scaling)", "scale", "dataType"};

void put32(std::vector<uint8_t>& out, uint32_t x) {
    for (int i = 0; i < 4; ++i) out.push_back(uint8_t(x >> (8 * i)));
}
void put64(std::vector<uint8_t>& out, uint64_t x) {
    for (int i = 0; i < 8; ++i) out.push_back(uint8_t(x >> (8 * i)));
}
uint32_t get32(const uint8_t* p) {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x |= uint32_t(p[i]) << (8 * i);
    return x;
}
uint64_t get64(const uint8_t* p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t(p[i]) << (8 * i);
    return x;
}

struct Fnv {
    uint64_t h = 1469598103934665603ull;
    void bytes(const void* data, size_t n) {
        const uint8_t* p = static_cast<const uint8_t*>(data);
        for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    }
    void u32(uint32_t x) { bytes(&x, 4); }
};

}  // namespace

uint64_t sketchHash(const PackedSketch& s) {
    Fnv fnv;
    fnv.u32(s.learned);
    fnv.u32(s.degree);
    fnv.u32(s.levels);
    fnv.u32(s.sketchLength);
    fnv.u32(s.hidden);
    fnv.bytes(&s.nodeScale, 4);
    fnv.u32(s.qkNorm);
    fnv.u32(s.localNorm);
    fnv.bytes(s.offsets.data(), s.offsets.size() * 4);
    fnv.bytes(s.data.data(), s.data.size() * 4);
    return fnv.h;
}

DecodeBlobHeader makeDecodeBlobHeader(const PskAttention_T& attention, uint32_t batch, uint32_t capacity) {
    const AttentionConfig& c = attention.config();
    const PolysketchForward* polysketch = attention.polysketch();
    uint32_t scaleBits;
    std::memcpy(&scaleBits, &c.scale, 4);
    DecodeBlobHeader h;
    const uint32_t config[DecodeBlobHeader::kConfigFields] = {
        uint32_t(c.kind), polysketch ? c.degree : 0, polysketch ? polysketch->plan().sketchLength : 0,
        polysketch ? polysketch->plan().blockSize : 0, c.headDim, c.valueDim, c.numQueryHeads, c.numKeyValueHeads,
        uint32_t(c.causal) | uint32_t(c.localExact) << 1 | uint32_t(c.referenceScaling) << 2, scaleBits, uint32_t(c.dataType)};
    std::memcpy(h.config, config, sizeof(config));
    h.sketchHash = polysketch ? sketchHash(polysketch->sketch()) : 0;
    h.batch = batch;
    h.capacity = capacity;
    return h;
}

uint64_t decodeBlobChecksum(const uint8_t* p, size_t size) { return xxh64(p, size); }

size_t decodeBlobPrefixBytes(uint32_t batch) { return kHeaderBytes + size_t(batch) * 8; }

std::vector<uint8_t> writeDecodeBlobPrefix(const DecodeBlobHeader& header, const std::vector<uint64_t>& positions) {
    std::vector<uint8_t> out(kMagic, kMagic + 8);
    put32(out, kFormatVersion);
    for (uint32_t f : header.config) put32(out, f);
    put64(out, header.sketchHash);
    put32(out, header.batch);
    put32(out, header.capacity);
    for (uint64_t p : positions) put64(out, p);
    return out;
}

void sealDecodeBlob(uint8_t* blob, size_t size) {
    const uint64_t sum = decodeBlobChecksum(blob, size - kDecodeBlobTrailerBytes);
    for (int i = 0; i < 8; ++i) blob[size - kDecodeBlobTrailerBytes + i] = uint8_t(sum >> (8 * i));
}

DecodeBlobPrefix readDecodeBlobPrefix(const uint8_t* in, size_t size, const DecodeBlobHeader& ours) {
    if (size < kHeaderBytes) fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, less than its ", kHeaderBytes, "-byte header");
    if (std::memcmp(in, kMagic, 8) != 0) fail(PSK_ERROR_BAD_FILE, "not a decode state blob (bad magic)");
    const uint32_t version = get32(in + kVersionAt);
    if (version < kOldestReadVersion || version > kFormatVersion)
        fail(PSK_ERROR_BAD_FILE, "state blob format version ", version, " is not supported (this library reads versions ",
             kOldestReadVersion, " to ", kFormatVersion, ")");
    DecodeBlobPrefix prefix;
    if (version >= 3) {
        // First the checksum, so that every check below reads the bytes that were written.
        prefix.trailerBytes = kDecodeBlobTrailerBytes;
        if (size < kHeaderBytes + kDecodeBlobTrailerBytes)
            fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, less than its header and checksum");
        const uint64_t stored = get64(in + size - kDecodeBlobTrailerBytes), computed = decodeBlobChecksum(in, size - kDecodeBlobTrailerBytes);
        if (stored != computed)
            fail(PSK_ERROR_BAD_FILE, "state blob is corrupt or truncated: checksum mismatch (stored 0x", std::hex, stored,
                 ", computed 0x", computed, " over ", std::dec, size - kDecodeBlobTrailerBytes, " bytes)");
    }
    for (int f = 0; f < DecodeBlobHeader::kConfigFields; ++f) {
        const uint32_t theirs = get32(in + kConfigAt + 4 * f), mine = ours.config[f];
        if (theirs != mine)
            fail(PSK_ERROR_BAD_FILE, "state blob belongs to another attention: its ", kConfigNames[f], " is ", theirs,
                 ", this attention's is ", mine);
    }
    if (get64(in + kHashAt) != ours.sketchHash)
        fail(PSK_ERROR_BAD_FILE, "state blob belongs to another attention: its sketch weights differ (hash mismatch)");
    const uint32_t theirBatch = get32(in + kBatchAt);
    if (theirBatch != ours.batch)
        fail(PSK_ERROR_BAD_FILE, "state blob holds ", theirBatch, " sequences; this state has batchSize ", ours.batch);
    // The capacity: none for polysketch (ours.capacity == 0); softmax, the cache the blob came from
    // (it may differ from this state's, which need only hold every position).
    const uint32_t theirCapacity = get32(in + kCapacityAt);
    const bool softmax = ours.capacity != 0;
    if (!softmax && theirCapacity != 0)
        fail(PSK_ERROR_BAD_FILE, "state blob: its capacity field is ", theirCapacity, "; a POLYSKETCH state has none (0)");
    if (softmax && (theirCapacity == 0 || theirCapacity > kMaxDecodeCapacity))
        fail(PSK_ERROR_BAD_FILE, "state blob: its capacity ", theirCapacity, " is not a SOFTMAX state's (1 to ", kMaxDecodeCapacity, ")");
    const size_t positionsEnd = decodeBlobPrefixBytes(ours.batch);
    if (size < positionsEnd + prefix.trailerBytes)
        fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, its positions end at ", positionsEnd);
    prefix.positions.resize(ours.batch);
    for (uint32_t s = 0; s < ours.batch; ++s) {
        const uint64_t p = get64(in + kHeaderBytes + 8 * s);
        if (!softmax && p > kMaxPolysketchPosition)
            fail(PSK_ERROR_BAD_FILE, "state blob: sequence ", s, " is at position ", p, ", beyond the limit 2^53 (", kMaxPolysketchPosition, ")");
        if (softmax && p > theirCapacity)
            fail(PSK_ERROR_BAD_FILE, "state blob: sequence ", s, " is at position ", p, ", beyond the blob's own capacity ", theirCapacity);
        if (softmax && p > ours.capacity)
            fail(PSK_ERROR_BAD_FILE, "state blob: sequence ", s, " is at position ", p, ", beyond this state's capacity ", ours.capacity);
        prefix.positions[s] = p;
    }
    return prefix;
}

}  // namespace psk
