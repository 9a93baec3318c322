// The serialized decode state's header (docs/DECODING.md, "Serialization"): layout, magic, format
// version, the little-endian field encoding, the hash of the packed sketch, the checksum trailer,
// and the checks a restore makes before it touches the state. The data after the header and the
// positions is the decoders' (Decoder::forEachBlobRegion).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

struct PskAttention_T;

namespace psk {

struct PackedSketch;

/** What the header says about the attention and the state. */
struct DecodeBlobHeader {
    // kind, degree, R, b, h, dv, Hq, Hkv, flags (causal | local exact << 1 | reference scaling << 2),
    // the scale's bits, data type; degree, R and b are 0 for softmax.
    static constexpr int kConfigFields = 11;
    uint32_t config[kConfigFields] = {};
    uint64_t sketchHash = 0;  // 0 for softmax
    uint32_t batch = 0, capacity = 0;
};

/** The header of a state of `attention` with `batch` sequences and `capacity` (softmax; else 0). */
DecodeBlobHeader makeDecodeBlobHeader(const PskAttention_T& attention, uint32_t batch, uint32_t capacity);

/** 64-bit FNV-1a over the packed sketch: its shape, weights, LayerNorm parameters and node scale. */
uint64_t sketchHash(const PackedSketch& sketch);

/**
 * The largest position a polysketch sequence may reach (2^53: exact as a double, so that bindings
 * and tools that read positions as doubles see them exactly). A step of a sequence at this
 * position fails (TOO_LARGE); a blob with a larger one is BAD_FILE. Softmax positions are bounded
 * by the capacity.
 */
constexpr uint64_t kMaxPolysketchPosition = uint64_t(1) << 53;

/** Bytes of the header and the B positions that follow it, before the data. */
size_t decodeBlobPrefixBytes(uint32_t batch);

/** Bytes after the data: the 64-bit checksum of everything before it (format version 3). */
constexpr size_t kDecodeBlobTrailerBytes = 8;

/** The blob's checksum: XXH64 (seed 0) of `size` bytes, as published by the xxHash project. */
uint64_t decodeBlobChecksum(const uint8_t* data, size_t size);

/** The header, then one 64-bit position per sequence. */
std::vector<uint8_t> writeDecodeBlobPrefix(const DecodeBlobHeader& header, const std::vector<uint64_t>& positions);

/** Writes the checksum of blob[0, size - 8) into its last 8 bytes (the blob is complete otherwise). */
void sealDecodeBlob(uint8_t* blob, size_t size);

/** What readDecodeBlobPrefix found: the positions and the bytes of the trailer (0 for version 2). */
struct DecodeBlobPrefix {
    std::vector<uint64_t> positions;
    size_t trailerBytes = 0;
};

/**
 * Checks a blob's header against `ours`, every field, before anything else: size, magic, version
 * (3, or 2, which has no checksum), the checksum (version 3), every config field by name, the
 * sketch hash, the batch size, the capacity (0 for polysketch; softmax 1 to kMaxDecodeCapacity),
 * the positions (polysketch at most kMaxPolysketchPosition; softmax at most the blob's capacity
 * and this state's, ours.capacity). BAD_FILE naming the field on any failure. The data's size
 * and values are the caller's to check (PskDecodeState_T::restore).
 */
DecodeBlobPrefix readDecodeBlobPrefix(const uint8_t* blob, size_t size, const DecodeBlobHeader& ours);

}  // namespace psk
