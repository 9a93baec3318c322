// Range safety of the cooperative-matrix kernels' 16-bit operands (docs/ARCHITECTURE.md,
// "Cooperative-matrix path"): with LayerNorm'd q and k (h = 64) the features psi(S(k)) reach
// 1e4-1e5 at p = 4 and far more at p = 8, and the prefix states 1e7 and beyond at long n, all
// outside float16 (65504). The kernels scale their operands by powers of two per block / chunk.
// This runs n >= 64k through the emulated backend (PSK_COOPMAT_EMULATION, so it runs on lavapipe)
// and checks that no output is inf or NaN and that the output matches the float64 reference with
// the float16 threshold of the conformance suite. Seeds: caseSeed of the case's name, as everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "forward/polysketch_plan.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "sketch/sketch_weights.hpp"
#include "support/host_forward.hpp"
#include "support/kernel_paths.hpp"
#include "reference/sketch_fixtures.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;

struct RangeCase {
    uint32_t degree, r, n;
    bool localExact;
};

/** e.g. "p4_r32_n65573_localexact": the test's name, and (with a prefix) its seed's. */
std::string rangeCaseName(const RangeCase& c) {
    return "p" + std::to_string(c.degree) + "_r" + std::to_string(c.r) + "_n" + std::to_string(c.n) +
           (c.localExact ? "_localexact" : "_sketchedlocal");
}

class CoopMatRange : public ContextTest, public ::testing::WithParamInterface<RangeCase> {};

TEST_P(CoopMatRange, LayerNormedInputsAtLongNStayFiniteAndAccurate) {
    const RangeCase rc = GetParam();
    const uint32_t h = 64, dv = 64, b = 256;
    const PskDataType type = PSK_DATA_TYPE_FLOAT16;
    const std::string caseName = "coopmat_range_layernormed_" + rangeCaseName(rc);
    const uint64_t seed = psk::conformance::caseSeed(caseName);
    // Inputs with an offset and spread per dimension (LayerNorm removes both): what a model's
    // activations look like, and LayerNorm'd rows have norm sqrt(h) = 8.
    std::vector<float> q = psk::test::randomNormal(size_t(rc.n) * h, seed + 1), k = psk::test::randomNormal(size_t(rc.n) * h, seed + 2);
    for (size_t i = 0; i < q.size(); ++i) {
        q[i] = 3.0f * q[i] + 0.5f * float(i % h) / h;
        k[i] = 2.0f * k[i] - 0.25f;
    }
    q = psk::storage::quantize(q, type);
    k = psk::storage::quantize(k, type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(rc.n) * dv, seed + 3), type);

    psk::QkNormWeights norm;
    norm.scale.assign(h, 1.0f);
    norm.bias.assign(h, 0.0f);
    psk::test::TempFile normFile("psk_range_qknorm");
    psk::writeSafeTensors(normFile.path(), psk::qkNormToSafeTensors(norm));

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = PSK_ATTENTION_CAUSAL_BIT | (rc.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = rc.degree;
    info.scale = 1.0f / std::sqrt(float(h));
    info.headDim = h;
    info.valueDim = dv;
    info.dataType = type;
    info.sketchSize = rc.r;
    info.blockSize = b;
    info.seed = seed;
    info.qkNormFile = normFile.path().c_str();

    std::vector<float> got;
    std::string plan;
    {
        const psk::test::KernelPathScope emulation(psk::test::KernelPath::Emulated);
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        size_t size = 0;
        ASSERT_EQ(pskGetAttentionPlan(attn, nullptr, &size), PSK_SUCCESS);
        plan.assign(size, '\0');
        ASSERT_EQ(pskGetAttentionPlan(attn, plan.data(), &size), PSK_SUCCESS);
        EXPECT_NE(plan.find("block_states_coopmat.emu_f16.f16"), std::string::npos) << plan;
        psk::test::HostForward forward;
        forward.layout = {1, rc.n, PSK_LAYOUT_BHND, 0};
        forward.type = type;
        forward.h = h;
        forward.dv = dv;
        got = forward.run(attn, q, k, v, nullptr);
        pskDestroyAttention(attn);
    }
    ASSERT_EQ(got.size(), size_t(rc.n) * dv);
    size_t nonFinite = 0;
    for (float x : got) nonFinite += !std::isfinite(x);
    EXPECT_EQ(nonFinite, 0u);

    psk::RandomSketchWeights w = psk::generateRandomSketch(seed, rc.degree, h, rc.r);
    psk::ref::PolysketchConfig config;
    config.sketch = psk::ref::sketchFunction(psk::test::toReference(w));
    const psk::ref::LayerNormParams ln = psk::test::toReference(norm.scale, norm.bias);
    config.qkNorm = &ln;
    config.degree = int(rc.degree);
    config.scale = info.scale;
    config.causal = true;
    config.localExact = rc.localExact;
    config.blockSize = int(b);
    const psk::ref::Shape shape{1, 1, 1, int(rc.n), int(h), int(dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
    const double err = psk::test::relativeMaxError(got, want);
    const double limit = psk::conformance::threshold(type, psk::conformance::Family::Polysketch);
    RecordProperty("relative_max_error", psk::ref::formatError(err));
    psk::conformance::printError("polysketch", type, psk::test::planImplementations(plan), caseName, err, limit);
    EXPECT_LE(err, limit);
}

INSTANTIATE_TEST_SUITE_P(Long, CoopMatRange,
                         ::testing::Values(RangeCase{4, 32, 65536 + 37, true}, RangeCase{8, 16, 65536 + 37, false}),
                         [](const ::testing::TestParamInfo<RangeCase>& i) { return rangeCaseName(i.param); });

// The baselines' cooperative kernel for float16 data (attention_flash_coopmat.comp): with s = 1 and
// q, k of spread 2 (h = 64) the scores s q.k have a spread of 16, so the degree-8 weights reach
// 1e12 and more and the softmax weights span e^-100 .. 1; the kernel takes each row's weights
// relative to a reference it moves (rescaling the row's sums) before they reach float16's range.
// Finite and within the conformance suite's float16 threshold against the float64 reference,
// causal and full, GQA.
/** e.g. "softmax_causal", "poly8_full": the test's name, and (with a prefix) its seed's. */
std::string baselineRangeName(PskAttentionKind kind, bool causal) {
    return std::string(kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "poly8") + (causal ? "_causal" : "_full");
}

class CoopMatBaselineRange : public ContextTest, public ::testing::WithParamInterface<std::tuple<PskAttentionKind, bool>> {};

TEST_P(CoopMatBaselineRange, LargeScoresStayFiniteAndAccurate) {
    const auto [kind, causal] = GetParam();
    const uint32_t h = 64, dv = 40, n = 211, Hq = 2, Hkv = 1;
    const PskDataType type = PSK_DATA_TYPE_FLOAT16;
    const std::string caseName = "coopmat_range_large_scores_" + baselineRangeName(kind, causal);
    const uint64_t seed = psk::conformance::caseSeed(caseName);
    std::vector<float> q = psk::test::randomNormal(size_t(Hq) * n * h, seed + 1), k = psk::test::randomNormal(size_t(Hkv) * n * h, seed + 2);
    for (float& x : q) x *= 2.0f;
    for (float& x : k) x *= 2.0f;
    q = psk::storage::quantize(q, type);
    k = psk::storage::quantize(k, type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(Hkv) * n * dv, seed + 3), type);

    PskAttentionCreateInfo info{};
    info.kind = kind;
    info.flags = causal ? PSK_ATTENTION_CAUSAL_BIT : 0;
    info.degree = 8;
    info.scale = 1.0f;
    info.numQueryHeads = Hq;
    info.numKeyValueHeads = Hkv;
    info.headDim = h;
    info.valueDim = dv;
    info.dataType = type;
    std::vector<float> got;
    std::string plan;
    {
        const psk::test::KernelPathScope emulation(psk::test::KernelPath::Emulated);
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        size_t size = 0;
        ASSERT_EQ(pskGetAttentionPlan(attn, nullptr, &size), PSK_SUCCESS);
        plan.assign(size, '\0');
        ASSERT_EQ(pskGetAttentionPlan(attn, plan.data(), &size), PSK_SUCCESS);
        EXPECT_NE(plan.find("attention_flash_coopmat.emu_f16_"), std::string::npos) << plan;
        psk::test::HostForward forward;
        forward.layout = {1, n, PSK_LAYOUT_BHND, 0};
        forward.type = type;
        forward.Hq = Hq;
        forward.Hkv = Hkv;
        forward.h = h;
        forward.dv = dv;
        got = forward.run(attn, q, k, v, nullptr);
        pskDestroyAttention(attn);
    }
    ASSERT_EQ(got.size(), size_t(Hq) * n * dv);
    size_t nonFinite = 0;
    for (float x : got) nonFinite += !std::isfinite(x);
    EXPECT_EQ(nonFinite, 0u);

    const psk::ref::Shape shape{1, int(Hq), int(Hkv), int(n), int(h), int(dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    if (kind == PSK_ATTENTION_KIND_SOFTMAX)
        psk::ref::softmaxAttention(shape, qd, kd, vd, 1.0, causal, want);
    else
        psk::ref::polynomialAttention(shape, qd, kd, vd, 1.0, 8, causal, want);
    const double err = psk::test::relativeMaxError(got, want);
    const double limit = psk::conformance::threshold(type, psk::conformance::Family::Quadratic);
    RecordProperty("relative_max_error", psk::ref::formatError(err));
    psk::conformance::printError("quadratic", type, psk::test::planImplementations(plan), caseName, err, limit);
    EXPECT_LE(err, limit);
}

INSTANTIATE_TEST_SUITE_P(Baselines, CoopMatBaselineRange,
                         ::testing::Combine(::testing::Values(PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<PskAttentionKind, bool>>& i) {
                             return baselineRangeName(std::get<0>(i.param), std::get<1>(i.param));
                         });

}  // namespace
