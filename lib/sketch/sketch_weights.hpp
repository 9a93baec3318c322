// Host-side sketch weights: the portable seeded generator of the random polynomial sketch (docs/MATH.md section 3),
// a minimal safetensors reader/writer (docs/MATH.md section 8), and the loaders that validate random and learned
// sketch files against the attention's head dim h and sketch size r.
//
// ---- Portable seeded generation (part of the library's compatibility contract) ----------------
//
// Generator: Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2,
// 3", SC'11), keyed by the 64-bit seed: key = {seed & 0xffffffff, seed >> 32}.
//
// Entry e (row-major linear index, e = row * cols + col) of the matrix of stream s is a pure
// function of (seed, s, e):
//     x[0..3] = philox4x32_10(counter = {e & 0xffffffff, e >> 32, s, 0}, key)
//     a = (x0 << 21) | (x1 >> 11)         53 bits:  u1 = (a + 1) / 2^53, in (0, 1]
//     b = (x2 << 21) | (x3 >> 11)         53 bits:  theta = 2 pi b / 2^53, in [0, 2 pi)
//     z = sqrt(-2 ln u1) * cos(theta)     (Box-Muller, cosine branch; the sine branch is unused)
//     entry = (float) z                   (round to nearest even)
// One Philox block per entry (no pairing of entries), so any entry can be recomputed alone.
//
// Stream ids of the random-sketch tensors (independent of the degree, h and r):
//     g{l}_{i}a -> (l << 24) | (i << 1)        g{l}_{i}b -> (l << 24) | (i << 1) | 1
// e.g. g1_0a = 0x01000000, g1_0b = 0x01000001, g1_1a = 0x01000002, g2_0b = 0x02000001. Level 0
// (streams below 2^24) is reserved. Consequence: the same seed gives the same level-1 matrices for
// p = 4 and p = 8 (and the same leading rows for a larger h), which is harmless: one sketch never
// reuses a matrix.
//
// Why it is bit-identical everywhere: ln and cos are NOT taken from <cmath>. libm's log/cos are
// not correctly rounded and differ between glibc, musl, macOS and MSVC by an ulp now and then.
// Instead both are evaluated here from IEEE-754 basic operations only (+, -, *, / and sqrt, all
// correctly rounded by IEEE-754 on every conforming platform), in a fixed order:
//   - cos(theta): the argument reduction is exact, in integers (theta is a 53-bit fraction of a
//     turn: the top 2 bits pick the quadrant, a reflection in integers brings the angle into
//     [0, pi/4]), then fixed-length nested Taylor series of sin and cos.
//   - ln(u1): u1 = f * 2^k exactly (integer bit length), f in [sqrt(1/2), sqrt(2)), then
//     ln f = 2 atanh((f-1)/(f+1)) by a fixed-length series, plus k * ln 2 with ln 2 split in a
//     high part (exact products) and a low part.
// Both are accurate to a few ulps of double (tests check against libm), so entries are, up to that
// tiny error, the true Box-Muller values. The conditions for bit-identity are then only that the
// compiler evaluates doubles as IEEE binary64 without excess precision (FLT_EVAL_METHOD 0: x86-64
// SSE2, AArch64, ...; checked at compile time) and without fusing a*b+c into an FMA: every product
// or quotient that feeds an addition is forced through a volatile double (which no contraction
// mode can fuse across; Clang ignores the FP_CONTRACT pragmas under an explicit
// -ffp-contract=fast), and FP contraction is also switched off around that code by pragma (GCC,
// Clang, MSVC). -ffast-math is refused at compile time. ldexp (exact) and sqrt (correctly rounded
// by IEEE-754) are the only <cmath> functions used.
// A second line of defence: if some toolchain still perturbed the double result by a few ulps
// (say an FMA slipped in), the final rounding to float hides the difference unless z lies within a
// few double ulps (~2^-51 relative) of a float rounding boundary (float ulp 2^-23 relative): that
// happens for about 2^-27 of the entries, i.e. almost surely never for a given sketch. Tests pin
// FNV-1a hashes of generated matrices (computed on x86-64 glibc and cross-checked against an
// independent Python implementation of the same definition).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace psk {

// ---------------------------------------------------------------------------------------------
// Counter-based generator and Gaussian matrices
// ---------------------------------------------------------------------------------------------

/** Philox4x32 with 10 rounds: one 128-bit block from a 128-bit counter and a 64-bit key. */
std::array<uint32_t, 4> philox4x32_10(const std::array<uint32_t, 4>& counter, const std::array<uint32_t, 2>& key);

/** Entry `index` of stream `streamId`, as defined at the top of this file (before rounding). */
double gaussianEntry(uint64_t seed, uint32_t streamId, uint64_t index);

/** rows x cols row-major matrix of N(0,1) float entries (see the top of this file). */
void gaussianMatrix(uint64_t seed, uint32_t streamId, uint32_t rows, uint32_t cols, std::vector<float>& out);

/** The deterministic elementary functions used by gaussianEntry, exposed for tests. */
namespace portable_math {
/** ln((a + 1) / 2^53) for a < 2^53. */
double logUnit53(uint64_t a);
/** cos(2 pi b / 2^53) for b < 2^53. */
double cosTurn53(uint64_t b);
}  // namespace portable_math

// ---------------------------------------------------------------------------------------------
// Random sketch weights (docs/MATH.md section 3 and 8)
// ---------------------------------------------------------------------------------------------

/** Degrees the library supports: 2, 4 and 8. */
bool isSupportedSketchDegree(uint32_t degree);

/** Stream id of tensor g{level}_{index}{a|b} (see the top of this file). */
uint32_t randomSketchStreamId(uint32_t level, uint32_t index, bool b);

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

/**
 * The sketch of degree p (2, 4 or 8) for head dim h and sketch size r, generated from `seed`
 * (referenceScaling false). Throws PSK_ERROR_INVALID_ARGUMENT on a bad degree or a zero size.
 */
RandomSketchWeights generateRandomSketch(uint64_t seed, uint32_t degree, uint32_t h, uint32_t r);

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

/** "f{branch+1}.{level}.{part}", part one of "ln.scale", "ln.bias", "dense1", "dense2". */
std::string learnedSketchTensorName(uint32_t branch, uint32_t level, const char* part);

// ---------------------------------------------------------------------------------------------
// safetensors
// ---------------------------------------------------------------------------------------------

struct Tensor {
    std::vector<uint32_t> shape;  // empty: a scalar
    std::vector<float> data;      // row-major, product(shape) entries
};

struct SafeTensors {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, std::string> metadata;  // "__metadata__"
};

/**
 * Parses a safetensors image: 8-byte little-endian header length N (at most 100 MB), N bytes of
 * JSON, then the data buffer. dtypes F32, F16 and BF16 are converted to float. Every defect
 * (truncation, bad JSON, unknown dtype, offsets outside the buffer, byte length not matching the
 * shape, ...) throws psk::Error with PSK_ERROR_BAD_FILE and a message naming it.
 */
SafeTensors parseSafeTensors(const uint8_t* bytes, size_t size);

/** Reads and parses a file; errors (including a missing file) are PSK_ERROR_BAD_FILE. */
SafeTensors readSafeTensors(const std::string& path);

/**
 * Serializes as F32, tensors in name order and contiguous, the header padded with spaces to a
 * multiple of 8 bytes. Throws PSK_ERROR_INVALID_ARGUMENT when a tensor's data does not match its
 * shape.
 */
std::vector<uint8_t> serializeSafeTensors(const SafeTensors& file);

/** Writes serializeSafeTensors(file); an I/O failure is PSK_ERROR_BAD_FILE. */
void writeSafeTensors(const std::string& path, const SafeTensors& file);

// ---------------------------------------------------------------------------------------------
// Loading and exporting sketches
// ---------------------------------------------------------------------------------------------

/**
 * Validates a random-sketch file and returns its weights. Metadata (all required): kind "random",
 * degree "2" | "4" | "8", sketch_size (decimal), scaling "unbiased" | "reference". The tensors
 * must be exactly those of randomSketchTensorSpecs(degree, h, r) (no missing, no extra ones), with
 * finite entries. `r` is the sketch size the caller expects, or 0 to take it from the file; a
 * non-zero `degree` must equal the file's. For degree 2 (no matrices) the file's sketch size is
 * not compared and the result's sketchSize is r when non-zero. Throws PSK_ERROR_BAD_FILE naming
 * the problem; PSK_ERROR_INVALID_ARGUMENT when h is 0.
 */
RandomSketchWeights loadRandomSketch(const SafeTensors& file, uint32_t h, uint32_t r, uint32_t degree = 0);

/**
 * Validates a learned-sketch file: metadata kind "learned", degree "4", sketch_size (scaling, if
 * present, must be "unbiased" or "reference" and is ignored); tensors exactly
 * f{1,2}.{0,1}.ln.scale / .ln.bias ([in]), .dense1 ([in, 8r]), .dense2 ([8r, r]), in = h at
 * level 0 and r at level 1, finite. `r` = 0 takes the sketch size from the file.
 */
LearnedSketchWeights loadLearnedSketch(const SafeTensors& file, uint32_t h, uint32_t r);

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

/**
 * Validates a qkNormFile: tensors "ln.scale" and "ln.bias" of shape [h], optionally the pair
 * "local_ln.scale" / "local_ln.bias" ([h]), finite, nothing else. Metadata is not required.
 * Throws PSK_ERROR_BAD_FILE naming the problem.
 */
QkNormWeights loadQkNorm(const SafeTensors& file, uint32_t h);

/** The file form of q/k LayerNorm parameters: loadQkNorm inverts it. */
SafeTensors qkNormToSafeTensors(const QkNormWeights& weights);

/** The file form of a random sketch (metadata included): loadRandomSketch inverts it. */
SafeTensors randomSketchToSafeTensors(const RandomSketchWeights& weights);

/** The file form of a learned sketch (metadata included): loadLearnedSketch inverts it. */
SafeTensors learnedSketchToSafeTensors(const LearnedSketchWeights& weights);

}  // namespace psk
