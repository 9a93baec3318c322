// The serialized decode state's header (docs/DECODING.md, "Serialization"): layout, magic, format
// version, the little-endian field encoding, the hash of the packed sketch, and the checks a
// restore makes before it touches the state. The data after the header and the positions is the
// decoders' (Decoder::forEachBlobRegion).
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

/** Bytes of the header and the B positions that follow it, before the data. */
size_t decodeBlobPrefixBytes(uint32_t batch);

/** The header, then one 64-bit position per sequence. */
std::vector<uint8_t> writeDecodeBlobPrefix(const DecodeBlobHeader& header, const std::vector<uint64_t>& positions);

/**
 * Checks a blob's header against `ours` (size, magic, version, every config field by name, the
 * sketch hash, the batch size; BAD_FILE on a mismatch) and that it holds the positions; returns
 * them. The capacity is not compared: the positions must fit this state's, checked by the caller.
 */
std::vector<uint64_t> readDecodeBlobPrefix(const uint8_t* blob, size_t size, const DecodeBlobHeader& ours);

}  // namespace psk
