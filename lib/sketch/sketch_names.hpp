// The layout of sketch weights (docs/MATH.md sections 3, 4, 5 and 8): the supported degrees, the
// names and shapes of the tensors a sketch of each kind has, and the structures that hold the
// weights under those names. The generator (philox.hpp), the file loaders (sketch_files.hpp) and the
// device packing (sketch_pack.hpp) all go by these.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace psk {

// ---------------------------------------------------------------------------------------------
// Random sketch weights (docs/MATH.md section 3 and 8)
// ---------------------------------------------------------------------------------------------

/** Degrees the library supports: 2, 4 and 8. */
bool isSupportedSketchDegree(uint32_t degree);

/** "g{level}_{index}a" or "...b". */
std::string randomSketchTensorName(uint32_t level, uint32_t index, bool b);

/**
 * The tensors of the sketch tree of degree p (p / 2 = 2^L): for each level l = 1..L and node
 * i < (p / 2) / 2^l, the names g{l}_{i}a and g{l}_{i}b, in that order (level by level).
 * Empty for p = 2.
 */
struct SketchTensorSpec {
    std::string name;
    uint32_t level, index;
    bool b;
    uint32_t rows, cols;  // h x r at level 1, r x r above
};
std::vector<SketchTensorSpec> randomSketchTensorSpecs(uint32_t degree, uint32_t headDim, uint32_t sketchSize);

struct RandomSketchWeights {
    uint32_t degree = 0;
    uint32_t headDim = 0;
    uint32_t sketchSize = 0;
    /** false: the unbiased sqrt(1/r) per node (docs/MATH.md section 3); true: google-research's G / sqrt(r). */
    bool referenceScaling = false;
    /**
     * name -> row-major matrix (x @ G). The entries are the unscaled N(0,1) G of docs/MATH.md section 3 in both
     * modes: the scaling is applied by whoever evaluates the sketch, according to the flag.
     */
    std::map<std::string, std::vector<float>> g;
};

// ---------------------------------------------------------------------------------------------
// Learned sketch weights (docs/MATH.md section 4 and 8), degree 4
// ---------------------------------------------------------------------------------------------

/** One FF level: LN (scale, bias: inDim), dense1 (inDim x 8r), dense2 (8r x r), row-major. */
struct LearnedFeedForward {
    uint32_t inDim = 0;
    std::vector<float> lnScale, lnBias, dense1, dense2;
};

struct LearnedSketchWeights {
    uint32_t degree = 4;
    uint32_t headDim = 0;
    uint32_t sketchSize = 0;
    /** ff[branch][level]: branch 0 = f1, 1 = f2; level 0 maps h -> r, level 1 maps r -> r. */
    LearnedFeedForward ff[2][2];
};

/** The parts of one FF level, in LearnedFeedForward's order: lnScale, lnBias, dense1, dense2. */
inline constexpr const char* kLearnedSketchParts[4] = {"ln.scale", "ln.bias", "dense1", "dense2"};

/** "f{branch+1}.{level}.{part}", part one of kLearnedSketchParts. */
std::string learnedSketchTensorName(uint32_t branch, uint32_t level, const char* part);

// ---------------------------------------------------------------------------------------------
// q/k LayerNorm (docs/MATH.md section 5)
// ---------------------------------------------------------------------------------------------

/** LayerNorm parameters shared by q and k (eps 1e-5), and optionally a separate pair for the
 *  exact local part. */
struct QkNormWeights {
    std::vector<float> scale, bias;            // "ln.scale", "ln.bias": [h]
    std::vector<float> localScale, localBias;  // "local_ln.scale", "local_ln.bias": [h] or empty
    bool hasLocal() const { return !localScale.empty(); }
};

}  // namespace psk
