// The conformance cases and their thresholds, shared by the GoogleTest conformance suites
// (tests/conformance_*_test.cpp) and `psk conformance` (tools/psk/cmd_conformance.cpp): one
// definition of what is checked and how closely, so that the installed tool and the test suite
// hold the library to the same contract.
//
// Metric: relativeMaxError (reference/error_metric.hpp) = max |got - want| / max |want| over the
// whole output, `want` the float64 reference run on the inputs already rounded to the storage
// type. Plain data and the C header's enums only: no library internals, no GoogleTest.
#pragma once

#include <polysketch/polysketch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "reference/error_metric.hpp"

namespace psk::conformance {

// ---- Thresholds --------------------------------------------------------------------------------
// Each about ten times the worst error measured over the whole test suite on lavapipe (every test
// that uses these thresholds, on every kernel path, the many-block cases, state passing and
// decoding; docs/RELIABILITY.md, "Conformance thresholds", has the worst case per storage type and
// kind and how to measure it again): tight enough that a kernel wrong in a few elements or by one
// summed term fails, with room for another device's float32 (FMA contraction, summation order).
// A GPU run of psk conformance prints its own worst per storage type.
//
// float32 storage, the kernels' own float32 arithmetic: softmax and exact polynomial (the tiled
// quadratic kernels) worst 6.1e-6 (softmax, full, n = 8200); polysketch, decoding and state
// passing against the float64 reference worst 3.9e-6 (p = 8, r = 64, full, n = 40).
inline constexpr double kQuadraticFloat32 = 6e-5;
inline constexpr double kPolysketchFloat32 = 4e-5;
// 16-bit storage: the rounding of the output (ulp 2^-11 ~ 4.9e-4 in float16, 2^-8 ~ 3.9e-3 in
// bfloat16) sets the floor, and the cooperative kernels' 16-bit operands add to it: worst float16
// 4.1e-4 on the generic and lane-team kernels, 1.1e-3 on the emulated cooperative ones; bfloat16
// 3.7e-3 and 8.5e-3. Ten times the generic worst would loosen these; they stay where they were,
// about 4x the generic kernels' worst and 1.4-1.8x the cooperative kernels' (a known precision
// margin, docs/RELIABILITY.md).
inline constexpr double kFloat16 = 2e-3;
inline constexpr double kBFloat16 = 1.2e-2;
// Decoded rows against the library's own forward over the same tokens (and chunked forwards with a
// decode state against one forward): float32 both sides, only the summation order differs. Worst
// 2.1e-6 (about 5x).
inline constexpr double kDecodeVsForward = 1e-5;

/** Which float32 threshold a case is held to. */
enum class Family { Quadratic, Polysketch };

/** The threshold for an output stored as `type`: `float32` for float32, else the 16-bit one. */
inline double outputThreshold(PskDataType type, double float32) {
    return type == PSK_DATA_TYPE_FLOAT16 ? kFloat16 : type == PSK_DATA_TYPE_BFLOAT16 ? kBFloat16 : float32;
}

inline double threshold(PskDataType type, Family family) {
    return outputThreshold(type, family == Family::Quadratic ? kQuadraticFloat32 : kPolysketchFloat32);
}

/** "f32", "f16", "bf16". */
const char* storageName(PskDataType type);

/**
 * Prints one checked error as every test that holds a kernel to these thresholds does, so that the
 * worst error per storage type, kind and kernel path can be collected from a test log
 * (docs/RELIABILITY.md, "Conformance thresholds"):
 *   [ error ] <check> <storage> <implementations> <case>: 1.234e-06 (threshold 2.0e-05)
 * `check` names what was compared ("polysketch", "quadratic", "decode-ref", ...), `implementations`
 * the kernels that ran ("team+generic", "cooperative+generic", ...; "-" when unknown).
 */
void printError(const std::string& check, PskDataType type, const std::string& implementations, const std::string& name, double error,
                double threshold);

/**
 * The seed of a case's inputs: FNV-1a (64-bit) of its name (offset basis 0xcbf29ce484222325,
 * prime 0x100000001b3, over the name's bytes). The tests and psk conformance both derive their
 * seeds here (q, k, v from seed + 1, + 2, + 3 through std::mt19937_64, a random sketch from the
 * seed itself), so a case gets the same seed on every build, compiler and platform, unlike
 * std::hash, whose values are implementation-defined.
 */
inline uint64_t caseSeed(const std::string& name) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
    return h;
}

// ---- Softmax and exact polynomial --------------------------------------------------------------
struct BaselineCase {
    PskAttentionKind kind = PSK_ATTENTION_KIND_SOFTMAX;
    uint32_t degree = 4;
    bool causal = false;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t B = 1, Hq = 2, Hkv = 2, n = 64, h = 64, dv = 64;
    uint32_t tokenPad = 0;  // extra elements between rows (custom strides), BHND only
};

/** A unique name, e.g. "poly4_causal_f16_bhnd_B1_Hq4_Hkv2_n77_h64_dv64" (the tests' parameter names). */
std::string name(const BaselineCase& c);

/** The full sweep: every kind x storage type x mask, n from 1 to 8217 (two key chunks), head dims
 *  16 to 256, layouts, grouped-query heads, batches, custom strides. */
std::vector<BaselineCase> baselineSweep();
/** The float32 shapes of baselineSweep up to n = 1000 (n = 1, below a key tile, not a multiple of
 *  it, several key chunks on a CPU driver's emulated kernel, GQA, batches, layouts, odd head dims,
 *  custom strides) in 16-bit storage, float16 and bfloat16 in turn: the sweep the cooperative
 *  kernel (16-bit storage only) is held to; n = 8217 is left out (the emulated backend is slow). */
std::vector<BaselineCase> baselineSweep16();
/** A few small cases of the same (psk conformance --quick): both kinds, both masks, every storage
 *  type, n = 1, odd n, several key tiles, grouped-query heads, BNHD, custom strides. */
std::vector<BaselineCase> baselineQuick();

// ---- Polysketch forward ------------------------------------------------------------------------
enum class SketchSource { Seed, File, Learned };

struct PolysketchCase {
    uint32_t degree = 4, r = 16, b = 32;
    bool causal = true, localExact = false, referenceScaling = false;
    bool qkNorm = false, localNorm = false;
    SketchSource source = SketchSource::Seed;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t B = 1, Hq = 2, Hkv = 1, n = 33, h = 32, dv = 32;
    uint32_t tokenPad = 0;
};

/** e.g. "seed_p4_r16_b32_causal_localexact_f16_bnhd_B2_Hq4_Hkv2_n53_h32_dv32". */
std::string name(const PolysketchCase& c);

/** n around the block size (1, b - 1, b, b + 1, 5b + 3), causal / full / local exact, degrees 2, 4,
 *  8, r = 8 to 128, sketch files, learned sketches, reference scaling, fused LayerNorms,
 *  grouped-query heads, batches, layouts, custom strides, odd value dims, every storage type. */
std::vector<PolysketchCase> polysketchSweep();
/** Every float32 case of polysketchSweep in 16-bit storage, float16 and bfloat16 in turn: the
 *  sweep the cooperative-matrix kernels (16-bit storage only) are held to. */
std::vector<PolysketchCase> polysketchSweep16();
/** 16-bit cases (float16 and bfloat16 in turn) small enough in h, r and dv that the tilings the
 *  planners choose on a GPU fit lavapipe's 32 KiB of shared memory with the emulation's 4-byte
 *  operands (PSK_COOPMAT_EMULATION=gpu-tiles): h = 16 (two row groups of subgroups in the feature
 *  map), dv = 24 and 40 (a partial column tile; three column tiles over two subgroups), r = 16 and
 *  32, b = 32 and 64, n around the block, causal / full, local exact, random and learned sketches,
 *  p = 2 and 8, grouped-query heads, BNHD. */
std::vector<PolysketchCase> polysketchGpuTilesSweep();
/** Some of polysketchGpuTilesSweep in float32 storage (n around the block, causal sketched and
 *  local exact, and the r = 32, dv = 40 local-exact case: 9 cases, 3 shapes): the GPU's tilings of the cooperative kernels with
 *  every operand split into float16 hi + lo (PSK_COOPMAT_FLOAT32=on), held to the float32
 *  threshold; elsewhere more float32 cases of the FP32 kernels. */
std::vector<PolysketchCase> polysketchGpuTilesSweep32();
/** Many blocks at the default block size: b = 256 and n = 32 b + 77 = 8269 (33 blocks, the last
 *  one partial; more blocks than the block scan's few-block column path and the sweep's 6), head
 *  dims h = 128 and 256, value dims 64, 128 and 256, r = 16 and the default 32, causal (sketched
 *  and local exact) and full, float32, float16 and bfloat16 storage. B = 1 and one head: on a CPU
 *  driver each kernel path of a case costs seconds (the emulated cooperative ones up to ten),
 *  the float64 reference O(n (r^2 dv + b (h + dv))) under one. conformance_long_test runs each
 *  case on the kernel paths that take it. */
std::vector<PolysketchCase> polysketchLongSweep();
/** A few small cases (psk conformance --quick): n = 1, below a block, a block and a row, causal,
 *  full, local exact, degree 8, learned and file sketches, LayerNorms, reference scaling,
 *  grouped-query heads, BNHD, custom strides, every storage type. */
std::vector<PolysketchCase> polysketchQuick();

// ---- Incremental decoding ----------------------------------------------------------------------
/**
 * A decode state of `prompts.size()` sequences (float32, causal): sequence i is prefilled with a
 * prompt of prompts[i] tokens, then every sequence takes `steps` steps. Every row (prompt and
 * steps) is checked against the float64 reference over the whole sequence (threshold
 * kPolysketchFloat32) and against the library's forward over the same tokens (kDecodeVsForward).
 */
struct DecodeCase {
    PskAttentionKind kind = PSK_ATTENTION_KIND_POLYSKETCH;
    bool learned = false, localExact = false;
    uint32_t degree = 4, r = 8, b = 16, h = 16, dv = 16, Hq = 4, Hkv = 2;
    std::vector<uint32_t> prompts{21, 32};
    uint32_t steps = 37;
};

/** e.g. "decode_polysketch_random_p4_localexact_r8_b16_h16_dv16_Hq4_Hkv2_prompts21,32_steps37". */
std::string name(const DecodeCase& c);

/** decode_test's configurations: random and learned sketches, sketched and local-exact, p = 4
 *  and 8, dv = 13 (not a multiple of 4); and the softmax KV cache. */
std::vector<DecodeCase> decodeSweep();
/** Sketched and local exact (p = 4, random sketch, dv = 16), and softmax. */
std::vector<DecodeCase> decodeQuick();

}  // namespace psk::conformance
