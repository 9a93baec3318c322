// The portable seeded generator of the random polynomial sketch (docs/MATH.md section 3): the
// Philox4x32-10 counter-based RNG, Box-Muller Gaussians from deterministic elementary functions, and
// generateRandomSketch, which fills a sketch's matrices from a seed.
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
#include <cstdint>
#include <vector>

#include "sketch/sketch_names.hpp"

namespace psk {

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

/** Stream id of tensor g{level}_{index}{a|b} (see the top of this file). */
uint32_t randomSketchStreamId(uint32_t level, uint32_t index, bool b);

/**
 * The sketch of degree p (2, 4 or 8) for head dim h and sketch size r, generated from `seed`
 * (referenceScaling false). Throws PSK_ERROR_INVALID_ARGUMENT on a bad degree or a zero size.
 */
RandomSketchWeights generateRandomSketch(uint64_t seed, uint32_t degree, uint32_t h, uint32_t r);

}  // namespace psk
