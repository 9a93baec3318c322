// The cooperative output computing S(q) and q' from q itself (shaders/polysketch_output_coopmat.comp,
// FUSED_QUERY; PolysketchPlan::fusedQuery): where the plan takes it and where it cannot (the query
// side must depend on q alone), what PSK_COOPMAT_FUSED_QUERY does, that the workspace then holds no
// query-side rows, and that the fused output equals the one computed from the feature map's rows.
// The conformance sweep's emulated runs hold it to the float64 reference (its random cases without
// LayerNorm take it, the LayerNorm and learned cases keep the rows).
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

std::string planOf(PskContext ctx, const PskAttentionCreateInfo& info) {
    PskAttention attn = nullptr;
    if (pskCreateAttention(ctx, &info, &attn) != PSK_SUCCESS) return {};
    size_t size = 0;
    std::string plan;
    if (pskGetAttentionPlan(attn, nullptr, &size) == PSK_SUCCESS) {
        plan.assign(size, '\0');
        pskGetAttentionPlan(attn, plan.data(), &size);
    }
    pskDestroyAttention(attn);
    return plan;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using FusedQuery = psk::test::ContextTest;

// Under the emulation the cooperative output is planned for 16-bit storage: degree 4 computes S(q)
// from q (FUSED_QUERY=2), degree 2 takes s q itself (1), and the feature map's line says it runs
// for k alone; degree 8, a LayerNorm and PSK_COOPMAT_FUSED_QUERY=off keep the rows, each with its
// reason. Without the emulation (lavapipe has no cooperative matrices) nothing is fused.
TEST_F(FusedQuery, PlannedWhereTheQuerySideDependsOnQAlone) {
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
        ScopedEnv unset("PSK_COOPMAT_FUSED_QUERY", nullptr);
        const std::string p4 = planOf(ctx, polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(has(p4, " FUSED_QUERY=2: ")) << p4;
        EXPECT_TRUE(has(p4, "; S(q) and q' computed from q in the kernel (the feature map runs for k alone)")) << p4;
        EXPECT_TRUE(has(p4, "; for k alone (the cooperative output computes S(q) and q' from q)")) << p4;
        const std::string p2 = planOf(ctx, polysketchInfo(2, PSK_ATTENTION_CAUSAL_BIT, PSK_DATA_TYPE_BFLOAT16));
        EXPECT_TRUE(has(p2, " FUSED_QUERY=1: ")) << p2;
        const std::string p8 = planOf(ctx, polysketchInfo(8, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(has(p8, " FUSED_QUERY=0: ")) << p8;
        EXPECT_TRUE(has(p8, "; S(q) and q' from the feature map's rows (degree 8 (two levels of products))")) << p8;

        PskAttentionCreateInfo ln = polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16);
        psk::test::TempFile normFile("psk_fused_qknorm");
        psk::writeSafeTensors(normFile.path(), psk::qkNormToSafeTensors(psk::test::randomQkNorm(ln.headDim, false, 3)));
        ln.qkNormFile = normFile.path().c_str();
        const std::string withNorm = planOf(ctx, ln);
        EXPECT_TRUE(has(withNorm, " FUSED_QUERY=0: ")) << withNorm;
        EXPECT_TRUE(has(withNorm, "(a LayerNorm before the sketch)")) << withNorm;
        EXPECT_FALSE(has(withNorm, "for k alone")) << withNorm;
    }
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
        ScopedEnv off("PSK_COOPMAT_FUSED_QUERY", "off");
        const std::string p4 = planOf(ctx, polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(has(p4, " FUSED_QUERY=0: ")) << p4;
        EXPECT_TRUE(has(p4, "(PSK_COOPMAT_FUSED_QUERY=off)")) << p4;
        EXPECT_TRUE(has(p4, "fused query off")) << p4;  // the plan's switches line
    }
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);
        const std::string p4 = planOf(ctx, polysketchInfo(4, kLocalExact, PSK_DATA_TYPE_FLOAT16));
        ASSERT_FALSE(p4.empty());
        EXPECT_FALSE(has(p4, "FUSED_QUERY")) << p4;
        EXPECT_FALSE(has(p4, "for k alone")) << p4;
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
// path), degree 2 and 4, local exact, sketched and full.
TEST_F(FusedQuery, FusedEqualsFeatureMapRows) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    // The other stages on their generic kernels: the emulated ones would only cost compile time.
    ScopedEnv stages("PSK_COOPMAT_STAGES", "output");
    struct Case {
        uint32_t degree, flags, h;
        PskDataType type;
        PskLayout layout;
    } cases[] = {{4, kLocalExact, 18, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BHND},
                 {4, PSK_ATTENTION_CAUSAL_BIT, 32, PSK_DATA_TYPE_BFLOAT16, PSK_LAYOUT_BNHD},
                 {4, 0, 32, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BHND},
                 {2, kLocalExact, 16, PSK_DATA_TYPE_FLOAT16, PSK_LAYOUT_BNHD}};
    const uint32_t n = 3 * 32 + 7, dv = 40;
    for (const Case& c : cases) {
        PskAttentionCreateInfo info = polysketchInfo(c.degree, c.flags, c.type);
        info.headDim = c.h;
        info.layout = c.layout;
        std::mt19937_64 rng(c.h * 10 + c.degree);
        std::normal_distribution<float> normal(0.f, 1.f);
        auto fill = [&](uint32_t heads, uint32_t dim) {
            std::vector<float> x(size_t(heads) * n * dim);
            for (float& e : x) e = normal(rng);
            return x;
        };
        const std::vector<float> q = fill(2, c.h), k = fill(1, c.h), v = fill(1, dv);
        const std::string what = "p" + std::to_string(c.degree) + " h" + std::to_string(c.h) + " flags " + std::to_string(c.flags);
        std::vector<float> out[2];
        for (int fused = 0; fused < 2; ++fused) {
            ScopedEnv mode("PSK_COOPMAT_FUSED_QUERY", fused ? "on" : "off");
            const std::string plan = planOf(ctx, info);
            EXPECT_EQ(has(plan, " FUSED_QUERY=0: "), fused == 0) << what << "\n" << plan;
            PskAttention attn = nullptr;
            ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS) << what;
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
        // Rounded to float16 (2^-11) or bfloat16 (2^-8): one ulp of the largest value.
        EXPECT_LE(maxDiff / maxRef, c.type == PSK_DATA_TYPE_BFLOAT16 ? 8e-3 : 1e-3) << what;
    }
}

}  // namespace
