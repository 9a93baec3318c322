// The portable seeded generator (see philox.hpp): Philox4x32-10, the deterministic ln and cos, the
// Gaussian entries and matrices, and the random sketch filled from them.
#include "sketch/philox.hpp"

#include <cfloat>
#include <cmath>
#include <limits>

#include "util/error.hpp"

// The portable generator relies on IEEE binary64 arithmetic evaluated without excess precision
// and without contraction (see philox.hpp).
static_assert(std::numeric_limits<double>::is_iec559, "polysketch needs IEEE-754 doubles");
static_assert(std::numeric_limits<float>::is_iec559, "polysketch needs IEEE-754 floats");
#if defined(__FAST_MATH__)
#error "philox.cpp must not be compiled with -ffast-math: seeded sketches would not be portable"
#endif
#if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0
#error "philox.cpp needs FLT_EVAL_METHOD == 0 (on 32-bit x86 compile with -msse2 -mfpmath=sse)"
#endif

namespace psk {

// =============================================================================================
// Philox4x32-10
// =============================================================================================

namespace {
constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1
}  // namespace

std::array<uint32_t, 4> philox4x32_10(const std::array<uint32_t, 4>& counter, const std::array<uint32_t, 2>& key) {
    uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += kPhiloxW0;
            k1 += kPhiloxW1;
        }
        const uint64_t p0 = uint64_t(kPhiloxM0) * c0;
        const uint64_t p1 = uint64_t(kPhiloxM1) * c2;
        const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
        const uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    return {c0, c1, c2, c3};
}

// =============================================================================================
// Deterministic elementary functions and the Gaussian entries. Everything between the pragmas is
// built from IEEE basic operations in a fixed order, with FP contraction (FMA fusion) off.
// =============================================================================================

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#elif defined(_MSC_VER)
#pragma fp_contract(off)
#endif

namespace portable_math {
namespace {
constexpr double kLn2Hi = 0x1.62e42feep-1;            // ln 2, high part: k * kLn2Hi is exact for |k| < 2^11
constexpr double kLn2Lo = 0x1.a39ef35793c76p-33;      // ln 2 - kLn2Hi
constexpr double kHalfPi = 0x1.921fb54442d18p+0;      // pi / 2, rounded
constexpr double kSqrtHalf = 0x1.6a09e667f3bcdp-1;    // sqrt(1/2), rounded
constexpr uint64_t kTwo50 = uint64_t(1) << 50;
constexpr uint64_t kTwo51 = uint64_t(1) << 51;
constexpr uint64_t kTwo53 = uint64_t(1) << 53;

// A value rounded to double before it feeds an addition, whatever the FP-contraction mode: the
// pragmas above are not honoured by every compiler under every flag (Clang ignores them with an
// explicit -ffp-contract=fast), a volatile store always is. Every product or quotient that feeds
// an addition below goes through it, so no a*b+c can be fused into an FMA.
double rounded(double value) {
    volatile double stored = value;
    return stored;
}
double roundedProduct(double a, double b) { return rounded(a * b); }

// cos x and sin x for x in [0, pi/4]: nested Taylor series, 10 terms (truncation < 1e-19).
double cosSmall(double x2) {
    double c = 1.0;
    for (int k = 10; k >= 1; --k) c = 1.0 - rounded(c * x2 / double((2 * k - 1) * (2 * k)));
    return c;
}
double sinSmall(double x, double x2) {
    double s = 1.0;
    for (int k = 10; k >= 1; --k) s = 1.0 - rounded(s * x2 / double((2 * k) * (2 * k + 1)));
    return x * s;
}
}  // namespace

double logUnit53(uint64_t a) {
    // u = m / 2^53 with m = a + 1 in [1, 2^53]; m = f * 2^bits with f in [1/2, 1), exactly.
    const uint64_t m = (a & (kTwo53 - 1)) + 1;
    int bits = 0;
    for (uint64_t t = m; t != 0; t >>= 1) ++bits;
    double f = std::ldexp(double(m), -bits);  // exact (a power-of-two scaling)
    int k = bits - 53;
    if (f < kSqrtHalf) {
        f = f + f;
        k -= 1;
    }
    // ln f = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...), |s| <= 0.1716, 13 terms (< 1e-19).
    const double s = (f - 1.0) / (f + 1.0);
    const double s2 = s * s;
    double p = 1.0 / 25.0;
    for (int j = 11; j >= 0; --j) p = 1.0 / double(2 * j + 1) + roundedProduct(s2, p);
    const double lnF = roundedProduct(s + s, p);
    const double dk = double(k);
    return roundedProduct(dk, kLn2Hi) + (roundedProduct(dk, kLn2Lo) + lnF);
}

double cosTurn53(uint64_t b) {
    // theta = 2 pi b / 2^53 = (pi/2) (quadrant + w / 2^51): exact integer reduction.
    b &= kTwo53 - 1;
    const unsigned quadrant = unsigned(b >> 51);
    const uint64_t w = b & (kTwo51 - 1);
    const bool reflect = w > kTwo50;  // alpha > pi/4: use pi/2 - alpha
    const uint64_t t = reflect ? kTwo51 - w : w;  // in [0, 2^50]
    const double x = double(t) * 0x1p-51 * kHalfPi;  // in [0, pi/4]
    const double x2 = x * x;
    const double c = cosSmall(x2), s = sinSmall(x, x2);
    const double cosAlpha = reflect ? s : c;
    const double sinAlpha = reflect ? c : s;
    switch (quadrant) {
        case 0:
            return cosAlpha;
        case 1:
            return -sinAlpha;
        case 2:
            return -cosAlpha;
        default:
            return sinAlpha;
    }
}
}  // namespace portable_math

double gaussianEntry(uint64_t seed, uint32_t streamId, uint64_t index) {
    const std::array<uint32_t, 4> x = philox4x32_10({uint32_t(index), uint32_t(index >> 32), streamId, 0u},
                                                    {uint32_t(seed), uint32_t(seed >> 32)});
    const uint64_t a = (uint64_t(x[0]) << 21) | (x[1] >> 11);
    const uint64_t b = (uint64_t(x[2]) << 21) | (x[3] >> 11);
    double r2 = -2.0 * portable_math::logUnit53(a);
    if (!(r2 > 0.0)) r2 = 0.0;  // u1 = 1: avoid -0
    return std::sqrt(r2) * portable_math::cosTurn53(b);
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

void gaussianMatrix(uint64_t seed, uint32_t streamId, uint32_t rows, uint32_t cols, std::vector<float>& out) {
    const uint64_t count = uint64_t(rows) * cols;
    if (count > std::numeric_limits<size_t>::max() / sizeof(float))
        fail(PSK_ERROR_TOO_LARGE, "gaussianMatrix: ", rows, " x ", cols, " is too large");
    out.resize(size_t(count));
    for (uint64_t e = 0; e < count; ++e) out[size_t(e)] = static_cast<float>(gaussianEntry(seed, streamId, e));
}

// =============================================================================================
// The random sketch: one stream per tensor
// =============================================================================================

uint32_t randomSketchStreamId(uint32_t level, uint32_t index, bool b) {
    return (level << 24) | (index << 1) | (b ? 1u : 0u);
}

RandomSketchWeights generateRandomSketch(uint64_t seed, uint32_t degree, uint32_t h, uint32_t r) {
    if (!isSupportedSketchDegree(degree))
        fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: degree ", degree, " is not supported (2, 4 or 8)");
    if (h == 0 || r == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "random sketch: h = ", h, " and r = ", r, " must be non-zero");
    RandomSketchWeights weights;
    weights.degree = degree;
    weights.headDim = h;
    weights.sketchSize = r;
    weights.referenceScaling = false;
    for (const SketchTensorSpec& spec : randomSketchTensorSpecs(degree, h, r))
        gaussianMatrix(seed, randomSketchStreamId(spec.level, spec.index, spec.b), spec.rows, spec.cols,
                       weights.g[spec.name]);
    return weights;
}

}  // namespace psk
