// Conformance of the composed polysketch forward (feature map -> block states -> Blelloch scan or
// reduction -> output) through the C API, against the float64 reference psk::ref::polysketchAttention
// with the very same sketch weights.
//
// Metric: relativeMaxError = max |gpu - ref| / max |ref| over the whole output, the reference run on
// the inputs rounded to the storage type. Thresholds: kPolysketchFloat32 for float32 storage (about
// ten times the worst float32 error of the suite), float16 2e-3, bfloat16 1.2e-2 (the output
// rounding dominates: ulp 2^-11 and 2^-8). The cases and the thresholds are
// reference/conformance_cases.hpp's, shared with psk conformance; every case prints its error
// ("[ error ] ...", %.3e) for docs/RELIABILITY.md's "Conformance thresholds".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "vk/context.hpp"
#include "sketch/sketch_weights.hpp"
#include "forward/polysketch_plan.hpp"
#include "kernels/team_kernels.hpp"
#include "support/host_forward.hpp"
#include "support/kernel_paths.hpp"
#include "reference/sketch_fixtures.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;

using Source = psk::conformance::SketchSource;
using Case = psk::conformance::PolysketchCase;
using psk::conformance::name;

std::string attentionPlan(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS) return {};
    std::string plan(size, '\0');
    if (pskGetAttentionPlan(attn, plan.data(), &size) != PSK_SUCCESS) return {};
    return plan;
}

/** The plan of an attention created from `info` on `ctx` (empty, with a failure, if creation fails). */
std::string planFor(PskContext ctx, const PskAttentionCreateInfo& info) {
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
    if (!attn) return {};
    const std::string plan = attentionPlan(attn);
    pskDestroyAttention(attn);
    return plan;
}

/** Runs the forward on the device; returns the dense BHND output (empty on failure) and the plan it ran. */
std::vector<float> runDevice(PskContext ctx, const Case& c, const PskAttentionCreateInfo& info, const std::vector<float>& q,
                             const std::vector<float>& k, const std::vector<float>& v, PskForwardStats* stats, std::string* plan) {
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
    if (!attn) return {};
    *plan = attentionPlan(attn);
    psk::test::HostForward forward;
    forward.layout = {c.B, c.n, c.layout, c.tokenPad};
    forward.type = c.type;
    forward.Hq = c.Hq;
    forward.Hkv = c.Hkv;
    forward.h = c.h;
    forward.dv = c.dv;
    forward.explicitStrides = c.tokenPad != 0;
    const std::vector<float> out = forward.run(attn, q, k, v, stats);
    uint64_t queried = 0;
    EXPECT_EQ(pskGetWorkspaceSize(attn, c.B, c.n, &queried), PSK_SUCCESS);
    if (stats && !out.empty()) EXPECT_EQ(queried, stats->workspaceBytes) << "pskGetWorkspaceSize disagrees with the call";
    pskDestroyAttention(attn);
    return out;
}

class PolysketchConformance : public ContextTest, public ::testing::WithParamInterface<Case> {};

TEST_P(PolysketchConformance, MatchesFloat64Reference) {
    const Case c = GetParam();
    const uint64_t seed = psk::conformance::caseSeed(name(c));
    const auto q = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hq * c.n * c.h, seed + 1), c.type);
    const auto k = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, seed + 2), c.type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, seed + 3), c.type);
    const float scale = 1.0f / std::sqrt(float(c.h));

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = (c.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0) |
                 (c.referenceScaling ? PSK_ATTENTION_REFERENCE_SCALING_BIT : 0);
    info.degree = c.degree;
    info.scale = scale;
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.dataType = c.type;
    info.layout = c.layout;
    info.sketchSize = c.r;
    info.blockSize = c.b;
    info.seed = seed;

    // The sketch, on the library's side (info) and the reference's.
    psk::ref::PolysketchConfig config;
    psk::test::TempFile sketchFile("psk_sketch"), normFile("psk_qknorm");
    if (c.source == Source::Learned) {
        const psk::LearnedSketchWeights w = psk::test::randomLearnedSketch(c.h, c.r, seed + 4);
        psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(w));
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = sketchFile.path().c_str();
        config.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
    } else {
        psk::RandomSketchWeights w = psk::generateRandomSketch(seed, c.degree, c.h, c.r);
        w.referenceScaling = c.referenceScaling;
        if (c.source == Source::File) {
            psk::writeSafeTensors(sketchFile.path(), psk::randomSketchToSafeTensors(w));
            info.sketchSource = PSK_SKETCH_SOURCE_FILE;
            info.sketchFile = sketchFile.path().c_str();
        }
        config.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
    }
    psk::ref::LayerNormParams qkNorm, localNorm;
    if (c.qkNorm) {
        const psk::QkNormWeights norm = psk::test::randomQkNorm(c.h, c.localNorm, seed + 5);
        psk::writeSafeTensors(normFile.path(), psk::qkNormToSafeTensors(norm));
        info.qkNormFile = normFile.path().c_str();
        qkNorm = psk::test::toReference(norm.scale, norm.bias);
        config.qkNorm = &qkNorm;
        if (c.localNorm) {
            localNorm = psk::test::toReference(norm.localScale, norm.localBias);
            config.localNorm = &localNorm;
        }
    }
    config.degree = int(c.degree);
    config.scale = scale;
    config.causal = c.causal;
    config.localExact = c.localExact;
    config.blockSize = int(c.b);

    PskForwardStats stats{};
    std::string plan;
    const std::vector<float> got = runDevice(ctx, c, info, q, k, v, &stats, &plan);
    ASSERT_FALSE(got.empty());
    // The emulated run holds the cooperative feature map to this sweep: 16-bit storage with a p = 4
    // sketch (random or learned) must have run it, not the generic kernel.
    if (psk::coopMatEmulationRequested() && c.type != PSK_DATA_TYPE_FLOAT32 && c.degree == 4)
        EXPECT_NE(plan.find("sketch_features_coopmat.emu_"), std::string::npos) << plan;
    // The generic feature map takes a learned sketch's products one row per invocation, tiled where
    // a table's features.learned_tile says so and r is a multiple of 4: the default runs (rows) and
    // generic_learned_tiled.Sweeps (a table of features.learned_tile 32, tools' CTest) hold both to
    // the reference, and the r = 10 case the row form with any table.
    if (c.source == Source::Learned && plan.find("sketch_features.learned.") != std::string::npos) {
        const bool tiledByTable = plan.find("features.learned_tile=32 from tuning table") != std::string::npos;
        if (c.r % 4 != 0)
            EXPECT_NE(plan.find("learned products one row per invocation: r is not a multiple of 4"), std::string::npos) << plan;
        else if (tiledByTable)
            EXPECT_NE(plan.find(" LEARNED_TILE=32"), std::string::npos) << plan;
        else if (psk::useTeamKernels(ctx->caps()))
            EXPECT_NE(plan.find("learned products one row per invocation: a CPU driver"), std::string::npos) << plan;
        else
            EXPECT_NE(plan.find("learned products one row per invocation: the model's form"), std::string::npos) << plan;
        const char* table = std::getenv("PSK_TUNING_TABLE");
        if (table && std::string(table).find("learned-tiled.tuning") != std::string::npos && c.r % 4 == 0)
            EXPECT_TRUE(tiledByTable) << "the tiled learned sweep ran the row form\n" << plan;
    }
    EXPECT_GT(stats.workspaceBytes, 0u);

    const psk::ref::Shape shape{int(c.B), int(c.Hq), int(c.Hkv), int(c.n), int(c.h), int(c.dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    ASSERT_GT(maxRef, 1e-3) << "reference output is degenerate; the test would prove nothing";
    const double error = psk::test::relativeMaxError(got, want);
    const double threshold = psk::conformance::threshold(c.type, psk::conformance::Family::Polysketch);
    RecordProperty("relative_max_error", psk::ref::formatError(error));  // in --gtest_output=xml, for the records
    psk::conformance::printError("polysketch", c.type, psk::test::planImplementations(plan), name(c), error, threshold);
    EXPECT_LE(error, threshold) << name(c);
}

// The workspace is linear in n: sketch rows (n r per head), local rows (n h), block states
// (ceil(n/b) r(r+1)/2 rows of dv + 1 floats rounded up to a multiple of 4, or of 8 where the
// lane-team kernels run, per key/value head), each region aligned to at most 256 bytes.
TEST_F(ContextTest, PolysketchWorkspaceIsLinearInN) {
    const uint32_t h = 64, dv = 48, r = 32, b = 256, Hq = 4, Hkv = 2, B = 3, F = r * (r + 1) / 2;
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    info.numQueryHeads = Hq;
    info.numKeyValueHeads = Hkv;
    info.headDim = h;
    info.valueDim = dv;
    info.sketchSize = r;
    info.blockSize = b;
    PskAttention attn = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
    // dv + 1 = 49 floats, padded to 52 (16-byte aligned rows) or 56 (32-byte, team kernels).
    const uint32_t stateRow = psk::useTeamKernels(ctx->caps()) ? 56 : 52;
    for (uint32_t n : {1u, 255u, 256u, 257u, 4096u, 20000u}) {
        const uint64_t blocks = (n + b - 1) / b;
        const uint64_t floats = uint64_t(B) * n * (Hq + Hkv) * (r + h) + uint64_t(B) * Hkv * blocks * F * stateRow;
        uint64_t bytes = 0;
        ASSERT_EQ(pskGetWorkspaceSize(attn, B, n, &bytes), PSK_SUCCESS);
        EXPECT_GE(bytes, floats * 4) << n;
        EXPECT_LE(bytes, floats * 4 + 5 * 256) << n;
    }
    uint64_t bytes = 0;
    // 2^20 tokens: the states alone exceed what one binding may address on most devices.
    const PskResult big = pskGetWorkspaceSize(attn, B, 1u << 20, &bytes);
    EXPECT_TRUE(big == PSK_ERROR_TOO_LARGE || (big == PSK_SUCCESS && bytes > (uint64_t(1) << 30))) << pskResultToString(big);
    EXPECT_EQ(pskGetWorkspaceSize(attn, B, 0, &bytes), PSK_ERROR_INVALID_SHAPE);
    EXPECT_EQ(pskGetWorkspaceSize(attn, B, 64, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(pskGetWorkspaceSize(nullptr, B, 64, &bytes), PSK_ERROR_INVALID_ARGUMENT);
    pskDestroyAttention(attn);
    psk::test::sharedLog().clear();  // the three refused calls above reported their errors
}

// The sweep runs once more with PSK_COOPMAT_EMULATION=1 (tests/CMakeLists.txt): then 16-bit
// storage must take the emulated variants of the cooperative block-state and output kernels, and
// without it the CI device (no cooperative matrices) must not, so neither run passes by running
// the other's kernels.
TEST_F(ContextTest, CooperativeKernelsRunExactlyWhenEmulationIsRequested) {
    PskDeviceInfo device{};
    ASSERT_EQ(pskGetDeviceInfo(ctx, &device), PSK_SUCCESS);
    const bool deviceHasCoopMat = device.cooperativeMatrixKHR || device.cooperativeMatrixNV;
    // Polysketch (block states and output) and the baselines (softmax, exact polynomial: one kernel).
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_POLYSKETCH, PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL}) {
        for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16, PSK_DATA_TYPE_FLOAT32}) {
            PskAttentionCreateInfo info{};
            info.kind = kind;
            info.flags = PSK_ATTENTION_CAUSAL_BIT;
            info.headDim = 32;
            info.dataType = type;
            PskAttention attn = nullptr;
            ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
            size_t size = 0;
            ASSERT_EQ(pskGetAttentionPlan(attn, nullptr, &size), PSK_SUCCESS);
            std::string plan(size, '\0');
            ASSERT_EQ(pskGetAttentionPlan(attn, plan.data(), &size), PSK_SUCCESS);
            pskDestroyAttention(attn);
            // Kernel lines only: the '# self-test:' comments name cooperative kernels of other plans.
            // Every emulated kernel on the requested shape (PSK_COOPMAT_EMULATION_SHAPE, whose runs
            // hold the kernels to the reference on other vendors' shapes).
            const psk::CoopMatShapeChoice shape = psk::coopMatEmulationShape();
            const std::string dims = "CM_M=" + std::to_string(shape.m) + " CM_N=" + std::to_string(shape.n) + " CM_K=" + std::to_string(shape.k) + " ";
            std::string kernels;
            for (size_t at = 0; at < plan.size();) {
                size_t end = plan.find('\n', at);
                if (end == std::string::npos) end = plan.size();
                const std::string line = plan.substr(at, end - at);
                at = end + 1;
                if (line.rfind('#', 0) == 0) continue;
                kernels += line + "\n";
                if (line.find("_coopmat.emu_") != std::string::npos) EXPECT_NE(line.find(dims), std::string::npos) << line;
            }
            const bool coop = kernels.find("_coopmat.") != std::string::npos;
            if (psk::coopMatEmulationRequested() && type != PSK_DATA_TYPE_FLOAT32) {
                const std::string operand = type == PSK_DATA_TYPE_BFLOAT16 ? "emu_bf16" : "emu_f16";
                const std::string storage = type == PSK_DATA_TYPE_BFLOAT16 ? ".bf16" : ".f16";
                if (kind == PSK_ATTENTION_KIND_POLYSKETCH) {
                    for (const char* kernel : {"block_states_coopmat.", "polysketch_output_coopmat."})
                        EXPECT_NE(plan.find(kernel + operand + storage), std::string::npos) << plan;
                    EXPECT_NE(plan.find("sketch_features_coopmat." + operand + "_random" + storage), std::string::npos) << plan;
                } else {
                    const char* k = kind == PSK_ATTENTION_KIND_SOFTMAX ? "_softmax" : "_polynomial";
                    EXPECT_NE(plan.find("attention_flash_coopmat." + operand + k + storage), std::string::npos) << plan;
                    EXPECT_EQ(plan.find("attention_tiled."), std::string::npos) << plan;
                }
            } else if (type == PSK_DATA_TYPE_FLOAT32 || !deviceHasCoopMat) {
                EXPECT_FALSE(coop) << plan;  // float32 storage keeps float32 operands; lavapipe has no cooperative matrices
            } else {
                // A GPU with cooperative matrices: the hardware variants, never the emulated ones.
                EXPECT_EQ(plan.find("_coopmat.emu_"), std::string::npos) << plan;
            }
        }
    }
}

// The feature map's kernel per sketch under emulation (16-bit storage): the cooperative kernel
// for p = 4, random and learned, the FP32 kernel for p = 2 (S = x) and p = 8 (two levels), each
// with its reason; never the emulated kernel without PSK_COOPMAT_EMULATION. That the chosen
// kernel computes the right thing is the sweep's part (MatchesFloat64Reference checks the plan of
// every case it runs).
TEST_F(ContextTest, CooperativeFeatureMapRunsForDegree4SketchesExactlyWhenEmulated) {
    const bool emulated = psk::coopMatEmulationRequested();
    psk::test::TempFile sketchFile("psk_learned");
    const psk::LearnedSketchWeights w = psk::test::randomLearnedSketch(32, 16, 7);
    psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(w));
    for (PskDataType type : {PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
        const std::string operand = type == PSK_DATA_TYPE_BFLOAT16 ? "emu_bf16" : "emu_f16";
        const std::string storage = type == PSK_DATA_TYPE_BFLOAT16 ? ".bf16" : ".f16";
        for (int sketch = 0; sketch < 4; ++sketch) {  // random p = 2, 4, 8; learned
            PskAttentionCreateInfo info{};
            info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
            info.flags = PSK_ATTENTION_CAUSAL_BIT;
            info.headDim = 32;
            info.sketchSize = 16;
            info.dataType = type;
            info.degree = sketch == 0 ? 2 : sketch == 2 ? 8 : 4;
            if (sketch == 3) {
                info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
                info.sketchFile = sketchFile.path().c_str();
            }
            const std::string plan = planFor(ctx, info);
            ASSERT_FALSE(plan.empty());
            if (!emulated) {
                EXPECT_EQ(plan.find("sketch_features_coopmat.emu_"), std::string::npos) << plan;
            } else if (info.degree == 4) {
                EXPECT_NE(plan.find("sketch_features_coopmat." + operand + (sketch == 3 ? "_learned" : "_random") + storage),
                          std::string::npos) << plan;
            } else {
                EXPECT_EQ(plan.find("sketch_features_coopmat."), std::string::npos) << plan;
                EXPECT_NE(plan.find("p = 4 sketches only"), std::string::npos) << plan;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Sweep, PolysketchConformance, ::testing::ValuesIn(psk::conformance::polysketchSweep()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

// Every float32 case of the sweep once more in 16-bit storage (float16 and bfloat16 in turn), with
// the 16-bit thresholds: the cooperative-matrix kernels take only 16-bit storage, so this is the
// sweep their emulated run (PSK_COOPMAT_EMULATION=1) exercises; in the other runs it covers the
// same shapes in 16-bit storage through the team and generic kernels.
INSTANTIATE_TEST_SUITE_P(Sweep16, PolysketchConformance, ::testing::ValuesIn(psk::conformance::polysketchSweep16()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

// Cases small enough that the GPU's tilings fit lavapipe's shared memory under the emulation: the
// ctest run with PSK_COOPMAT_EMULATION=gpu-tiles (tests/CMakeLists.txt, `coopmat_gpu_tiles.`)
// runs the multi-subgroup indexing of the kernels a GPU runs; the other runs take them as more
// 16-bit cases.
INSTANTIATE_TEST_SUITE_P(GpuTiles16, PolysketchConformance, ::testing::ValuesIn(psk::conformance::polysketchGpuTilesSweep()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

// The same tilings in float32 storage, every operand split into float16 hi + lo: the CTest
// coopmat_gpu_tiles_f32.Sweep runs them with PSK_COOPMAT_EMULATION=gpu-tiles and
// PSK_COOPMAT_FLOAT32=on (tests/CMakeLists.txt).
INSTANTIATE_TEST_SUITE_P(GpuTiles32, PolysketchConformance, ::testing::ValuesIn(psk::conformance::polysketchGpuTilesSweep32()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

/** The value of specialization constant `name` on the plan line of `kernel` ("" when absent). */
std::string planConstant(const std::string& plan, const std::string& kernel, const std::string& name) {
    const size_t line = plan.find(kernel);
    if (line == std::string::npos) return {};
    const size_t end = plan.find('\n', line);
    const std::string text = plan.substr(line, end == std::string::npos ? std::string::npos : end - line);
    const size_t at = text.find(" " + name + "=");
    if (at == std::string::npos) return {};
    const size_t from = at + name.size() + 2;
    return text.substr(from, text.find(' ', from) - from);
}

// Under PSK_COOPMAT_EMULATION=gpu-tiles the GpuTiles16 shapes take the GPU's tilings, with more
// than one subgroup along the rows of each cooperative stage (the emulation's own small tiling has
// one): what makes that run test something the small-tile run does not. Other runs: the small
// tiling or no cooperative kernel, never the GPU's.
TEST_F(ContextTest, GpuTilingRunsUnderEmulationExactlyWhenRequested) {
    const psk::CoopMatEmulation mode = psk::coopMatEmulationMode();
    psk::test::TempFile sketchFile("psk_learned");
    psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(psk::test::randomLearnedSketch(16, 16, 11)));
    for (bool learned : {false, true}) {
        PskAttentionCreateInfo info{};
        info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
        info.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
        info.headDim = 16;
        info.valueDim = 40;
        info.sketchSize = 16;
        info.blockSize = 32;
        info.dataType = PSK_DATA_TYPE_FLOAT16;
        if (learned) {
            info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
            info.sketchFile = sketchFile.path().c_str();
        }
        const std::string plan = planFor(ctx, info);
        ASSERT_FALSE(plan.empty());
        const bool gpuTiles = plan.find("PSK_COOPMAT_EMULATION=gpu-tiles") != std::string::npos;
        EXPECT_EQ(gpuTiles, mode == psk::CoopMatEmulation::GpuTiles) << plan;
        if (mode != psk::CoopMatEmulation::GpuTiles) continue;
        const psk::CoopMatShapeChoice shape = psk::coopMatEmulationShape();
        if (shape.m != 16 || shape.n != 16 || shape.k != 16) {
            // Another vendor's shape (PSK_COOPMAT_EMULATION_SHAPE): other tilings, the same
            // property, several row groups of subgroups and several tiles per subgroup.
            auto atLeast2 = [&](const char* kernel, const char* constant) {
                EXPECT_GE(std::atoi(planConstant(plan, kernel, constant).c_str()), 2) << kernel << " " << constant << "\n" << plan;
            };
            if (!learned) atLeast2("sketch_features_coopmat.emu_f16", "SG_M");
            atLeast2("block_states_coopmat.emu_f16", "SG_M");
            atLeast2("block_states_coopmat.emu_f16", "WM");
            atLeast2("polysketch_output_coopmat.emu_f16", "SG_M");
            atLeast2("polysketch_output_coopmat.emu_f16", "WN");
            continue;
        }
        // The learned feature map's pools (hidden units, two branches) leave room for one row group
        // here: the GPU table's last tiling, 2 column subgroups (the small tiling has 4).
        EXPECT_EQ(planConstant(plan, "sketch_features_coopmat.emu_f16", "SG_M"), learned ? "1" : "2") << plan;
        EXPECT_EQ(planConstant(plan, "sketch_features_coopmat.emu_f16", "SG_N"), "2") << plan;
        EXPECT_EQ(planConstant(plan, "block_states_coopmat.emu_f16", "WM"), "2") << plan;
        EXPECT_EQ(planConstant(plan, "block_states_coopmat.emu_f16", "SG_M"), "2") << plan;
        EXPECT_EQ(planConstant(plan, "polysketch_output_coopmat.emu_f16", "SG_M"), "2") << plan;
        EXPECT_EQ(planConstant(plan, "polysketch_output_coopmat.emu_f16", "WN"), "2") << plan;
    }
}

}  // namespace
