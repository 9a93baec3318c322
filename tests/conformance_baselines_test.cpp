// Conformance of the quadratic kernels (softmax, exact polynomial) against the float64 reference.
//
// Metric: relativeMaxError = max |gpu - ref| / max |ref| over the whole output. The reference runs
// on the inputs after rounding to the storage type, so the thresholds measure the kernel's float32
// arithmetic plus the rounding of the output alone:
//   float32 1e-4, float16 2e-3 (output ulp 2^-11 ~ 4.9e-4), bfloat16 1.2e-2 (ulp 2^-8 ~ 3.9e-3).
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "support/host_forward.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;

struct Case {
    PskAttentionKind kind = PSK_ATTENTION_KIND_SOFTMAX;
    uint32_t degree = 4;
    bool causal = false;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t B = 1, Hq = 2, Hkv = 2, n = 64, h = 64, dv = 64;
    uint32_t tokenPad = 0;  // extra elements between rows (custom strides), BHND only
};

std::string name(const Case& c) {
    std::ostringstream s;
    s << (c.kind == PSK_ATTENTION_KIND_SOFTMAX ? "softmax" : "poly") ;
    if (c.kind != PSK_ATTENTION_KIND_SOFTMAX) s << c.degree;
    s << (c.causal ? "_causal" : "_full") << "_" << (c.type == PSK_DATA_TYPE_FLOAT32 ? "f32" : c.type == PSK_DATA_TYPE_FLOAT16 ? "f16" : "bf16")
      << (c.layout == PSK_LAYOUT_BNHD ? "_bnhd" : "_bhnd") << "_B" << c.B << "_Hq" << c.Hq << "_Hkv" << c.Hkv << "_n" << c.n
      << "_h" << c.h << "_dv" << c.dv;
    if (c.tokenPad) s << "_pad" << c.tokenPad;
    return s.str();
}

class BaselineConformance : public ContextTest, public ::testing::WithParamInterface<Case> {};

TEST_P(BaselineConformance, MatchesFloat64Reference) {
    const Case c = GetParam();
    const uint64_t seed = std::hash<std::string>{}(name(c));
    // Inputs as the device will see them (rounded to the storage type).
    const auto q = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hq * c.n * c.h, seed + 1), c.type);
    const auto k = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, seed + 2), c.type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, seed + 3), c.type);

    // Polynomial weights need s q.k of order one to be meaningful; softmax uses its default.
    const float scale = 1.0f / std::sqrt(float(c.h));
    PskAttentionCreateInfo info{};
    info.kind = c.kind;
    info.flags = c.causal ? PSK_ATTENTION_CAUSAL_BIT : 0;
    info.degree = c.degree;
    info.scale = c.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0.0f : scale;
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.dataType = c.type;
    info.layout = c.layout;
    PskAttention attn = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);

    const float sentinel = 12345.0f;
    psk::test::HostForward forward;
    forward.layout = {c.B, c.n, c.layout, c.tokenPad};
    forward.type = c.type;
    forward.Hq = c.Hq;
    forward.Hkv = c.Hkv;
    forward.h = c.h;
    forward.dv = c.dv;
    forward.explicitStrides = c.tokenPad != 0;
    forward.gap = sentinel;
    std::vector<float> outAll;
    const std::vector<float> got = forward.run(attn, q, k, v, nullptr, &outAll);
    pskDestroyAttention(attn);
    ASSERT_FALSE(got.empty());
    if (c.tokenPad) {
        const float storedSentinel = psk::storage::quantize({sentinel}, c.type)[0];
        const PskTensorStrides os = forward.layout.strides(c.Hq, c.dv);
        // Gaps between rows must be untouched.
        size_t touched = 0, gaps = 0;
        for (uint32_t b = 0; b < c.B; ++b)
            for (uint32_t hh = 0; hh < c.Hq; ++hh)
                for (uint32_t t = 0; t + 1 < c.n; ++t)
                    for (uint32_t d = c.dv; d < c.dv + c.tokenPad; ++d, ++gaps)
                        touched += outAll[psk::test::DeviceLayout::offset(os, b, hh, t) + d] != storedSentinel;
        EXPECT_EQ(touched, 0u) << "of " << gaps << " gap elements";
    }

    psk::ref::Shape shape{int(c.B), int(c.Hq), int(c.Hkv), int(c.n), int(c.h), int(c.dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    if (c.kind == PSK_ATTENTION_KIND_SOFTMAX)
        psk::ref::softmaxAttention(shape, qd, kd, vd, 1.0 / std::sqrt(double(c.h)), c.causal, want);
    else
        psk::ref::polynomialAttention(shape, qd, kd, vd, scale, int(c.degree), c.causal, want);

    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    ASSERT_GT(maxRef, 1e-3) << "reference output is degenerate; the test would prove nothing";
    const double err = psk::test::relativeMaxError(got, want);
    EXPECT_LE(err, psk::test::outputThreshold(c.type, 1e-4)) << name(c);
}

std::vector<Case> sweep() {
    std::vector<Case> cases;
    // Every kind x storage type x mask on a modest shape with grouped-query heads.
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL}) {
        for (uint32_t degree : {2u, 4u, 8u}) {
            if (kind == PSK_ATTENTION_KIND_SOFTMAX && degree != 4) continue;
            for (PskDataType type : {PSK_DATA_TYPE_FLOAT32, PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16}) {
                for (bool causal : {false, true}) {
                    Case c;
                    c.kind = kind;
                    c.degree = degree;
                    c.type = type;
                    c.causal = causal;
                    c.Hq = 4;
                    c.Hkv = 2;
                    c.n = 77;
                    cases.push_back(c);
                }
            }
        }
    }
    // Shapes: n (1, 7, 64, 300, 1000), head dims, layouts, grouped-query, batches.
    for (PskAttentionKind kind : {PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_KIND_POLYNOMIAL}) {
        for (bool causal : {false, true}) {
            auto add = [&](uint32_t n, uint32_t h, uint32_t dv, uint32_t Hq, uint32_t Hkv, PskLayout layout, uint32_t B = 1,
                           PskDataType type = PSK_DATA_TYPE_FLOAT32) {
                Case c;
                c.kind = kind;
                c.causal = causal;
                c.n = n;
                c.h = h;
                c.dv = dv;
                c.Hq = Hq;
                c.Hkv = Hkv;
                c.layout = layout;
                c.B = B;
                c.type = type;
                cases.push_back(c);
            };
            for (uint32_t n : {1u, 7u, 64u, 300u}) add(n, 64, 64, 2, 1, PSK_LAYOUT_BHND);
            add(1000, 64, 64, 1, 1, PSK_LAYOUT_BHND);
            add(65, 32, 32, 3, 1, PSK_LAYOUT_BNHD, 2);
            add(129, 128, 128, 2, 2, PSK_LAYOUT_BNHD);
            add(40, 256, 256, 1, 1, PSK_LAYOUT_BHND);
            add(33, 16, 80, 4, 4, PSK_LAYOUT_BHND, 1, PSK_DATA_TYPE_FLOAT16);
            add(70, 48, 24, 6, 2, PSK_LAYOUT_BNHD, 2, PSK_DATA_TYPE_BFLOAT16);
            // Longer than one key chunk (8192 keys): the state carried between dispatches.
            add(8200 + (causal ? 17 : 0), 16, 16, 1, 1, PSK_LAYOUT_BHND);
        }
    }
    Case padded;
    padded.tokenPad = 3;
    padded.B = 2;
    padded.n = 50;
    padded.dv = 40;
    cases.push_back(padded);
    padded.kind = PSK_ATTENTION_KIND_POLYNOMIAL;
    padded.causal = true;
    padded.type = PSK_DATA_TYPE_FLOAT16;
    cases.push_back(padded);
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Sweep, BaselineConformance, ::testing::ValuesIn(sweep()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

}  // namespace
