#include "reference/sketch_fixtures.hpp"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include <unistd.h>

namespace psk::test {

namespace {

std::vector<float> normals(size_t count, std::mt19937_64& rng, float mean, float sigma) {
    std::normal_distribution<float> dist(mean, sigma);
    std::vector<float> v(count);
    for (float& x : v) x = dist(rng);
    return v;
}

}  // namespace

LearnedSketchWeights randomLearnedSketch(uint32_t h, uint32_t r, uint64_t seed) {
    std::mt19937_64 rng(seed);
    LearnedSketchWeights w;
    w.headDim = h;
    w.sketchSize = r;
    for (auto& branch : w.ff) {
        for (uint32_t level = 0; level < 2; ++level) {
            LearnedFeedForward& ff = branch[level];
            ff.inDim = level == 0 ? h : r;
            ff.lnScale = normals(ff.inDim, rng, 1.0f, 0.1f);
            ff.lnBias = normals(ff.inDim, rng, 0.0f, 0.1f);
            ff.dense1 = normals(size_t(ff.inDim) * 8 * r, rng, 0.0f, 1.0f / std::sqrt(float(ff.inDim)));
            ff.dense2 = normals(size_t(8) * r * r, rng, 0.0f, 1.0f / std::sqrt(float(8 * r)));
        }
    }
    return w;
}

QkNormWeights randomQkNorm(uint32_t h, bool withLocal, uint64_t seed) {
    std::mt19937_64 rng(seed);
    QkNormWeights w;
    w.scale = normals(h, rng, 1.0f, 0.1f);
    w.bias = normals(h, rng, 0.0f, 0.1f);
    if (withLocal) {
        w.localScale = normals(h, rng, 1.0f, 0.1f);
        w.localBias = normals(h, rng, 0.0f, 0.1f);
    }
    return w;
}

ref::RandomSketch toReference(const RandomSketchWeights& w) {
    ref::RandomSketch s;
    s.degree = int(w.degree);
    s.h = int(w.headDim);
    s.r = int(w.sketchSize);
    s.referenceScaling = w.referenceScaling;
    for (const auto& [name, data] : w.g) s.g[name] = std::vector<double>(data.begin(), data.end());
    return s;
}

ref::LearnedSketch toReference(const LearnedSketchWeights& w) {
    ref::LearnedSketch s;
    s.h = int(w.headDim);
    s.r = int(w.sketchSize);
    for (int b = 0; b < 2; ++b) {
        for (int l = 0; l < 2; ++l) {
            const LearnedFeedForward& ff = w.ff[b][l];
            ref::FeedForward& out = s.f[b][l];
            out.in = int(ff.inDim);
            out.ln = toReference(ff.lnScale, ff.lnBias);
            out.dense1.assign(ff.dense1.begin(), ff.dense1.end());
            out.dense2.assign(ff.dense2.begin(), ff.dense2.end());
        }
    }
    return s;
}

ref::LayerNormParams toReference(const std::vector<float>& scale, const std::vector<float>& bias) {
    ref::LayerNormParams p;
    p.scale.assign(scale.begin(), scale.end());
    p.bias.assign(bias.begin(), bias.end());
    return p;
}

TempFile::TempFile(const std::string& stem) {
    static std::atomic<uint32_t> counter{0};
    path_ = (std::filesystem::temp_directory_path() /
             (stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".safetensors"))
                .string();
}

TempFile::~TempFile() { std::remove(path_.c_str()); }

}  // namespace psk::test
