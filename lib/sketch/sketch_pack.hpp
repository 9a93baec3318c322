// The device form of a sketch: every weight the feature-map kernel (shaders/sketch_features.comp)
// reads, packed into one float array with offsets, and the pair table of the packed
// self-tensoring (shaders/self_tensor.glsl). Pure host code, unit-testable without a GPU.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "sketch/sketch_weights.hpp"

namespace psk {

struct PackedSketch {
    bool learned = false;
    uint32_t degree = 4;
    uint32_t levels = 0;        // random sketch: log2(p / 2); 0 for p = 2 (S(x) = x)
    uint32_t sketchLength = 0;  // R = length of S(x): r, or h for p = 2
    uint32_t hidden = 8;        // learned sketch: 8r (the kernel needs some value otherwise)
    float nodeScale = 1.0f;     // random: 1/sqrt(r) per tree node (unbiased) or 1/r (reference)
    bool qkNorm = false;        // LayerNorm before sketching
    bool localNorm = false;     // separate LayerNorm for the local exact part
    uint32_t lnScale = 0, lnBias = 0, localLnScale = 0, localLnBias = 0;  // offsets in floats
    /**
     * Random: transposed G1_0a, G1_0b, G1_1a, G1_1b, G2_0a, G2_0b (R x in). Learned: for FF
     * (branch b, level l) at 4 (2b + l): LN scale, LN bias, dense1^T (8r x in), dense2 (8r x r).
     */
    std::array<uint32_t, 16> offsets{};
    std::vector<float> data;  // never empty (a kernel binding needs a buffer); every offset and the size are multiples of 4 (vec4 reads)

    /** Features of the packed self-tensoring: R (R + 1) / 2. */
    uint32_t features() const { return sketchLength * (sketchLength + 1) / 2; }
};

/** Packs a random sketch (any degree 2, 4, 8) and optional LayerNorm parameters. */
PackedSketch packRandomSketch(const RandomSketchWeights& sketch, const QkNormWeights* norm);

/** Packs a learned sketch (degree 4) and optional LayerNorm parameters. */
PackedSketch packLearnedSketch(const LearnedSketchWeights& sketch, const QkNormWeights* norm);

/**
 * Pair table of psi for a sketch of length R: entry f is a | (b << 16) with squares first
 * (f < R: a = b = f) and then the pairs a < b, a-major, as psk::ref::selfTensorPacked orders them.
 */
std::vector<uint32_t> selfTensorPairs(uint32_t sketchLength);

}  // namespace psk
