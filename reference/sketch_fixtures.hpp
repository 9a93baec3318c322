// Sketch weights for the tests and the psk tool: random learned sketches and LayerNorm parameters,
// conversions of the library's weight structs into the float64 reference's, and temporary
// .safetensors files. Its own small library (psk_sketch_fixtures, reference/CMakeLists.txt), so that
// psk conformance, demo and bench make the test suite's weights without depending on tests/; it uses
// lib/sketch's header-only structs and links nothing of the library. No GoogleTest here.
#pragma once

#include <cstdint>
#include <string>

#include "reference/reference.hpp"
#include "sketch/sketch_weights.hpp"

namespace psk::test {

/** A learned sketch with plausible random weights (dense ~ N(0, 1/in), LN scale ~ 1 + N(0, 0.1^2)). */
LearnedSketchWeights randomLearnedSketch(uint32_t h, uint32_t r, uint64_t seed);

/** LayerNorm parameters (scale ~ 1 + N(0, 0.1^2), bias ~ N(0, 0.1^2)), optionally a local pair. */
QkNormWeights randomQkNorm(uint32_t h, bool withLocal, uint64_t seed);

ref::RandomSketch toReference(const RandomSketchWeights& w);
ref::LearnedSketch toReference(const LearnedSketchWeights& w);
ref::LayerNormParams toReference(const std::vector<float>& scale, const std::vector<float>& bias);

/** A file in the system temp directory, removed on destruction. */
class TempFile {
public:
    explicit TempFile(const std::string& stem);
    ~TempFile();
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

}  // namespace psk::test
