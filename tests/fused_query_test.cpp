// The cooperative output computing S(q) and q' from q itself (shaders/polysketch_output_coopmat.comp,
// FUSED_QUERY, QUERY_NORM; PolysketchPlan::fusedQuery): where the plan takes it and where it does
// not (the learned sketch, degree 8), what PSK_COOPMAT_FUSED_QUERY does, that the workspace then holds no
// query-side rows, and that the fused output equals the one computed from the feature map's rows.
// The conformance sweep's emulated runs hold it to the float64 reference (its random cases of
// degree 2 and 4 take it, with and without LayerNorms; the learned and degree-8 cases keep the rows).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "reference/sketch_fixtures.hpp"
#include "sketch/sketch_files.hpp"
#include "support/host_forward.hpp"
#include "support/scoped_env.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ScopedEnv;

PskAttentionCreateInfo polysketchInfo(uint32_t degree, uint32_t flags, PskDataType type) {
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = flags;
    info.degree = degree;
    info.numQueryHeads = 2;
    info.numKeyValueHeads = 1;
    info.headDim = 32;
    info.valueDim = 40;
    info.sketchSize = 16;
    info.blockSize = 32;
    info.dataType = type;
    return info;
}

constexpr uint32_t kLocalExact = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/** Writes a q/k LayerNorm file (with the local one when `local`) and points `info` at it. */
void withNorm(PskAttentionCreateInfo& info, psk::test::TempFile& file, bool local, uint64_t seed) {
    psk::writeSafeTensors(file.path(), psk::qkNormToSafeTensors(psk::test::randomQkNorm(info.headDim, local, seed)));
    info.qkNormFile = file.path().c_str();
}

using FusedQuery = psk::test::ContextTest;

// Under the emulation the cooperative output is planned for 16-bit storage: degree 4 computes S(q)
// from q (FUSED_QUERY=2), degree 2 takes x itself (1), with the LayerNorms as QUERY_NORM bits, and
// the feature map's line says it runs for k alone; degree 8, the learned sketch, a tiling the
// fused pools would shrink and PSK_COOPMAT_FUSED_QUERY=off keep the rows, each with its reason. Without the emulation it is fused
// exactly where the device's output is cooperative (never on lavapipe).
TEST_F(FusedQuery, PlannedWhereTheQuerySideDependsOnQAlone) {
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
        ScopedEnv unset("PSK_COOPMAT_FUSED_QUERY", nullptr);
        const std::string p4 = psk::test::attentionPlan(ctx, polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(has(p4, " FUSED_QUERY=2 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << p4;
        EXPECT_TRUE(has(p4, "; S(q) and q' computed from q in the kernel (the feature map runs for k alone)")) << p4;
        EXPECT_TRUE(has(p4, "; for k alone (the cooperative output computes S(q) and q' from q)")) << p4;
        const std::string p2 = psk::test::attentionPlan(ctx, polysketchInfo(2, PSK_ATTENTION_CAUSAL_BIT, PSK_DATA_TYPE_BFLOAT16));
        EXPECT_TRUE(has(p2, " FUSED_QUERY=1 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << p2;
        const std::string p8 = psk::test::attentionPlan(ctx, polysketchInfo(8, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(has(p8, " FUSED_QUERY=0 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << p8;
        EXPECT_TRUE(has(p8, "; S(q) and q' from the feature map's rows (degree 8 (two levels of products))")) << p8;

        for (bool local : {false, true}) {
            PskAttentionCreateInfo ln = polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16);
            psk::test::TempFile normFile("psk_fused_qknorm");
            withNorm(ln, normFile, local, 3);
            const std::string plan = psk::test::attentionPlan(ctx, ln);
            EXPECT_TRUE(has(plan, local ? " FUSED_QUERY=2 QUERY_NORM=3 STAGE_BATCH=8 Z_PACKED=1: " : " FUSED_QUERY=2 QUERY_NORM=1 STAGE_BATCH=8 Z_PACKED=1: ")) << plan;
        }
        PskAttentionCreateInfo learned = polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16);
        psk::test::TempFile sketchFile("psk_fused_learned");
        psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(psk::test::randomLearnedSketch(learned.headDim, learned.sketchSize, 5)));
        learned.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        learned.sketchFile = sketchFile.path().c_str();
        const std::string fromRows = psk::test::attentionPlan(ctx, learned);
        EXPECT_TRUE(has(fromRows, " FUSED_QUERY=0 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << fromRows;
        EXPECT_TRUE(has(fromRows, "; S(q) and q' from the feature map's rows (a learned sketch)")) << fromRows;
        EXPECT_FALSE(has(fromRows, "for k alone")) << fromRows;
    }
    {
        // The GPU's tiling in lavapipe's 32 KiB: at r = 32, dv = 40 the pools of x would shrink the
        // tiles, so the rows stay; at r = 16, dv = 24 the tiling is the same either way.
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "gpu-tiles");
        ScopedEnv unset("PSK_COOPMAT_FUSED_QUERY", nullptr);
        PskAttentionCreateInfo info = polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16);
        info.headDim = 16;
        info.sketchSize = 32;
        const std::string wide = psk::test::attentionPlan(ctx, info);
        EXPECT_TRUE(has(wide, " FUSED_QUERY=0 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << wide;
        EXPECT_TRUE(has(wide, "(computing them here would shrink the tiles to fit shared memory)")) << wide;
        info.sketchSize = 16;
        info.valueDim = 24;
        const std::string narrow = psk::test::attentionPlan(ctx, info);
        EXPECT_TRUE(has(narrow, " FUSED_QUERY=2 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << narrow;
        EXPECT_TRUE(has(narrow, " SG_M=2 ")) << narrow;  // two row groups: the GPU's tiling
    }
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
        ScopedEnv off("PSK_COOPMAT_FUSED_QUERY", "off");
        const std::string p4 = psk::test::attentionPlan(ctx, polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(has(p4, " FUSED_QUERY=0 QUERY_NORM=0 STAGE_BATCH=8 Z_PACKED=1: ")) << p4;
        EXPECT_TRUE(has(p4, "(PSK_COOPMAT_FUSED_QUERY=off)")) << p4;
        EXPECT_TRUE(has(p4, "fused query off")) << p4;  // the plan's switches line
    }
    {
        // The device's own kernels: fused exactly where the output is cooperative (on a GPU with
        // cooperative matrices; never on lavapipe).
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
        const std::string p4 = psk::test::attentionPlan(ctx, polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        ASSERT_FALSE(p4.empty());
        const bool coopOutput = has(p4, "polysketch_output_coopmat.");
        EXPECT_EQ(has(p4, " FUSED_QUERY=2 "), coopOutput) << p4;
        EXPECT_EQ(has(p4, "for k alone"), coopOutput) << p4;
        PskDeviceInfo device{};
        ASSERT_EQ(pskGetDeviceInfo(ctx, &device), PSK_SUCCESS);
        if (!device.cooperativeMatrixKHR && !device.cooperativeMatrixNV) EXPECT_FALSE(coopOutput) << p4;
    }
}

// A misspelled value fails attention creation instead of silently measuring something else.
TEST_F(FusedQuery, MisspelledSwitchIsAnError) {
    ScopedEnv fused("PSK_COOPMAT_FUSED_QUERY", "maybe");
    PskAttentionCreateInfo info = polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16);
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(attn, nullptr);
    std::string errors;
    for (const std::string& e : psk::test::sharedLog().errors) errors += e + "\n";
    EXPECT_TRUE(has(errors, "PSK_COOPMAT_FUSED_QUERY=maybe: expected auto, on or off")) << errors;
    psk::test::sharedLog().clear();  // the refused creation reported its error
}

// The workspace of a fused plan holds no S(q) and no q' rows: B Hq n (r + h) floats fewer.
TEST_F(FusedQuery, WorkspaceHoldsNoQueryRows) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    const PskAttentionCreateInfo info = polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16);
    const uint32_t B = 2, n = 1000;
    uint64_t bytes[2] = {};
    for (int fused = 0; fused < 2; ++fused) {
        ScopedEnv mode("PSK_COOPMAT_FUSED_QUERY", fused ? "on" : "off");
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        EXPECT_EQ(pskGetWorkspaceSize(attn, B, n, &bytes[fused]), PSK_SUCCESS);
        pskDestroyAttention(attn);
    }
    const uint64_t queryRows = uint64_t(B) * info.numQueryHeads * n * (info.sketchSize + info.headDim) * 4;
    EXPECT_GE(bytes[0], bytes[1] + queryRows) << bytes[0] << " against " << bytes[1];
    EXPECT_LE(bytes[0], bytes[1] + queryRows + 2 * 256) << bytes[0] << " against " << bytes[1];  // region alignment
}

// The same inputs with S(q) and q' computed in the output and read from the feature map's rows:
// the same float32 numbers up to the order of the sums over h, so the outputs agree to the 16-bit
// rounding of the output. Several blocks and a short tail block, grouped-query heads, q in BNHD and
// in BHND with padded tokens (the kernel's own strided reads), h = 18 (the weight rows not on vec4s: the scalar
// path), degree 2 and 4, local exact and sketched, without LayerNorm, with one before the sketch
// and with a separate local one (q' then differs from x); bfloat16 runs in the sweep.
TEST_F(FusedQuery, FusedEqualsFeatureMapRows) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    // The other stages on their generic kernels: the emulated ones would only cost compile time.
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    // Shapes of the conformance sweep's cases where they can be (h = dv = 32, r = 16, its block
    // sizes), so that the fused pipelines are those the sweep compiles (llvmpipe compiles each
    // emulated output for ~20 s; the shader cache keeps them).
    enum Norm { None, QK, QKAndLocal };
    struct Case {
        uint32_t degree, flags, h, b;
        PskDataType type;
        PskLayout layout;
        Norm norm;
    } cases[] = {{4, kLocalExact, 18, 32, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BHND, None},
                 {4, PSK_ATTENTION_CAUSAL_BIT, 32, 16, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BNHD, QK},
                 {4, kLocalExact, 32, 16, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BNHD, QKAndLocal},
                 {2, PSK_ATTENTION_CAUSAL_BIT, 32, 32, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BHND, None}};
    const uint32_t n = 3 * 32 + 7, dv = 32;
    for (const Case& c : cases) {
        PskAttentionCreateInfo info = polysketchInfo(c.degree, c.flags, c.type);
        info.headDim = c.h;
        info.valueDim = dv;
        info.blockSize = c.b;
        info.layout = c.layout;
        psk::test::TempFile normFile("psk_fused_norm");
        if (c.norm != None) withNorm(info, normFile, c.norm == QKAndLocal, c.h);
        std::mt19937_64 rng(c.h * 10 + c.degree);
        std::normal_distribution<float> normal(0.f, 1.f);
        auto fill = [&](uint32_t heads, uint32_t dim) {
            std::vector<float> x(size_t(heads) * n * dim);
            for (float& e : x) e = normal(rng);
            return x;
        };
        const std::vector<float> q = fill(2, c.h), k = fill(1, c.h), v = fill(1, dv);
        const std::string what = "p" + std::to_string(c.degree) + " h" + std::to_string(c.h) + " flags " + std::to_string(c.flags) +
                                 " norm " + std::to_string(int(c.norm));
        std::vector<float> out[2];
        for (int fused = 0; fused < 2; ++fused) {
            ScopedEnv mode("PSK_COOPMAT_FUSED_QUERY", fused ? "on" : "off");
            PskAttention attn = nullptr;
            ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS) << what;
            const std::string plan = psk::test::attentionPlan(attn);
            EXPECT_EQ(has(plan, " FUSED_QUERY=0 "), fused == 0) << what << "\n" << plan;
            psk::test::HostForward fwd;
            // BHND: 3 padding elements after every token (strides passed); BNHD: the heads interleaved.
            fwd.layout = {1, n, c.layout, c.layout == PSK_LAYOUT_BHND ? 3u : 0u};
            fwd.explicitStrides = c.layout == PSK_LAYOUT_BHND;
            fwd.type = c.type;
            fwd.Hq = 2;
            fwd.Hkv = 1;
            fwd.h = c.h;
            fwd.dv = dv;
            out[fused] = fwd.run(attn, q, k, v);
            pskDestroyAttention(attn);
            ASSERT_FALSE(out[fused].empty()) << what;
        }
        double maxRef = 0, maxDiff = 0;
        for (size_t i = 0; i < out[0].size(); ++i) {
            ASSERT_TRUE(std::isfinite(out[1][i])) << what << " at " << i;
            maxRef = std::max(maxRef, double(std::fabs(out[0][i])));
            maxDiff = std::max(maxDiff, double(std::fabs(out[1][i] - out[0][i])));
        }
        ASSERT_GT(maxRef, 1e-3) << what;
        // Both outputs are rounded to float16 (ulp 2^-11 relative): one ulp of the largest value.
        EXPECT_LE(maxDiff / maxRef, 1e-3) << what;
    }
}

}  // namespace
