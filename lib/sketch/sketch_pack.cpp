#include "sketch/sketch_pack.hpp"

#include <cmath>

#include "util/error.hpp"

namespace psk {

namespace {

/** Pads `data` with zeros to a multiple of 8 floats: every packed tensor starts on a vec4 (the
 *  generic kernels read vec4s) and on 32 bytes (the lane-team kernels read 8 floats at a time). */
void alignVec4(std::vector<float>& data) { data.resize((data.size() + 7) / 8 * 8, 0.0f); }

/** Appends `values` and returns their offset in floats. */
uint32_t append(std::vector<float>& data, const std::vector<float>& values) {
    alignVec4(data);
    const size_t offset = data.size();
    data.insert(data.end(), values.begin(), values.end());
    return static_cast<uint32_t>(offset);
}

/** Appends the transpose of a rows x cols row-major matrix (so one column becomes one row). */
uint32_t appendTransposed(std::vector<float>& data, const std::vector<float>& m, uint32_t rows, uint32_t cols) {
    if (m.size() != size_t(rows) * cols) fail(PSK_ERROR_INTERNAL, "sketch matrix of the wrong size");
    alignVec4(data);
    const size_t offset = data.size();
    data.resize(offset + m.size());
    for (uint32_t r = 0; r < rows; ++r)
        for (uint32_t c = 0; c < cols; ++c) data[offset + size_t(c) * rows + r] = m[size_t(r) * cols + c];
    return static_cast<uint32_t>(offset);
}

void appendNorm(PackedSketch& p, const QkNormWeights* norm) {
    if (!norm) return;
    p.qkNorm = true;
    p.lnScale = append(p.data, norm->scale);
    p.lnBias = append(p.data, norm->bias);
    if (norm->hasLocal()) {
        p.localNorm = true;
        p.localLnScale = append(p.data, norm->localScale);
        p.localLnBias = append(p.data, norm->localBias);
    }
}

void finish(PackedSketch& p) {
    alignVec4(p.data);
    if (p.data.empty()) p.data.resize(4, 0.0f);
    if (p.data.size() >= (size_t(1) << 32)) fail(PSK_ERROR_TOO_LARGE, "sketch weights exceed 2^32 floats");
}

}  // namespace

PackedSketch packRandomSketch(const RandomSketchWeights& s, const QkNormWeights* norm) {
    PackedSketch p;
    p.degree = s.degree;
    const uint32_t m = s.degree / 2;
    p.levels = m == 1 ? 0 : m == 2 ? 1 : 2;
    p.sketchLength = p.levels == 0 ? s.headDim : s.sketchSize;
    const double r = s.sketchSize;
    p.nodeScale = static_cast<float>(s.referenceScaling ? 1.0 / r : 1.0 / std::sqrt(r));
    uint32_t slot = 0;
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(s.degree, s.headDim, s.sketchSize)) {
        const auto it = s.g.find(spec.name);
        if (it == s.g.end()) fail(PSK_ERROR_INTERNAL, "random sketch lacks ", spec.name);
        p.offsets[slot++] = appendTransposed(p.data, it->second, spec.rows, spec.cols);
    }
    appendNorm(p, norm);
    finish(p);
    return p;
}

PackedSketch packLearnedSketch(const LearnedSketchWeights& s, const QkNormWeights* norm) {
    PackedSketch p;
    p.learned = true;
    p.degree = 4;
    p.sketchLength = s.sketchSize;
    p.hidden = 8 * s.sketchSize;
    for (uint32_t branch = 0; branch < 2; ++branch) {
        for (uint32_t level = 0; level < 2; ++level) {
            const LearnedFeedForward& ff = s.ff[branch][level];
            const uint32_t base = 4 * (2 * branch + level);
            p.offsets[base + 0] = append(p.data, ff.lnScale);
            p.offsets[base + 1] = append(p.data, ff.lnBias);
            p.offsets[base + 2] = appendTransposed(p.data, ff.dense1, ff.inDim, p.hidden);
            p.offsets[base + 3] = append(p.data, ff.dense2);
        }
    }
    appendNorm(p, norm);
    finish(p);
    return p;
}

std::vector<uint32_t> selfTensorPairs(uint32_t R) {
    if (R == 0 || R > 0xFFFF) fail(PSK_ERROR_INTERNAL, "sketch length out of range for the pair table");
    std::vector<uint32_t> pairs;
    pairs.reserve(size_t(R) * (R + 1) / 2);
    for (uint32_t a = 0; a < R; ++a) pairs.push_back(a | (a << 16));
    for (uint32_t a = 0; a < R; ++a)
        for (uint32_t b = a + 1; b < R; ++b) pairs.push_back(a | (b << 16));
    return pairs;
}

}  // namespace psk
