// A case the conformance sweeps are blind to, found by the mutation check
// (tools/mutation_check.py, docs/RELIABILITY.md "Mutation check"): with shaders/coopmat.glsl's
// CM_TO_OPERAND made the identity, the emulated cooperative backend computes with float32 operands
// instead of float16 / bfloat16 ones, and no test of the default set failed. That is *more*
// accurate, so no threshold against the exact reference can see it; but the emulation exists to
// run, on lavapipe, what a GPU's 16-bit operands compute. The test holds the output to the float64
// reference of the same attention with 16-bit weights, in a case where the two differ by far more
// than rounding: two keys whose softmax weights differ by less than half a float16 ulp and whose
// values cancel.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "support/host_forward.hpp"
#include "support/test_context.hpp"
#include "support/scoped_env.hpp"

namespace {

using psk::test::ScopedEnv;

using psk::test::ContextTest;

std::string planOf(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS) return {};
    std::string plan(size, '\0');
    if (pskGetAttentionPlan(attn, plan.data(), &size) != PSK_SUCCESS) return {};
    return plan;
}

// Both cooperative baseline kernels: the FlashAttention-2 one packs its weights into 16-bit pairs
// itself (pack_pair), attention_tiled_coopmat.comp rounds them with the backend's CM_TO_OPERAND
// (PSK_COOPMAT_BASELINE=tiled): the second is what holds the emulation's rounding to account.
using RoundingParam = std::tuple<PskDataType, const char*>;
class CoopEmulationRounding : public ContextTest, public ::testing::WithParamInterface<RoundingParam> {};

TEST_P(CoopEmulationRounding, SoftmaxWeightsAreSixteenBitOperands) {
    const PskDataType type = std::get<0>(GetParam());
    const std::string baseline = std::get<1>(GetParam());
    const uint32_t n = 2, h = 16, dv = 16;
    // Both queries e_0; key 0 = 0, key 1 = -2^-13 e_0 (exact in float16 and bfloat16): with scale 1
    // the scores are 0 and -2^-13, the weights 1 and e^(-2^-13) = 1 - 1.22e-4, which rounds to 1 as
    // a 16-bit operand (float16's ulp below 1 is 2^-11). Values +1 and -1 cancel: the exact output
    // is (1 - e^(-2^-13)) / (1 + e^(-2^-13)) ~ 6.1e-5, with 16-bit weights exactly 0.
    std::vector<float> q(size_t(n) * h, 0.0f), k(size_t(n) * h, 0.0f), v(size_t(n) * dv);
    q[0] = q[h] = 1.0f;
    k[h] = -std::ldexp(1.0f, -13);
    for (uint32_t c = 0; c < dv; ++c) {
        v[c] = 1.0f;
        v[dv + c] = -1.0f;
    }

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_SOFTMAX;
    info.scale = 1.0f;
    info.numQueryHeads = 1;
    info.numKeyValueHeads = 1;
    info.headDim = h;
    info.valueDim = dv;
    info.dataType = type;

    std::vector<float> got;
    {
        ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
        ScopedEnv kernel("PSK_COOPMAT_BASELINE", baseline.c_str());
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        const std::string plan = planOf(attn);
        ASSERT_NE(plan.find((baseline == "flash" ? "attention_flash_coopmat.emu_" : "attention_tiled_coopmat.emu_")), std::string::npos)
            << plan;
        psk::test::HostForward forward;
        forward.layout = {1, n, PSK_LAYOUT_BHND, 0};
        forward.type = type;
        forward.h = h;
        forward.dv = dv;
        got = forward.run(attn, q, k, v, nullptr);
        pskDestroyAttention(attn);
    }
    ASSERT_EQ(got.size(), size_t(n) * dv);

    // float64 reference with the weights as 16-bit operands (relative rounding: the kernel scales
    // them by a power of two first), normalized by the exact sum of the weights as the kernel does.
    const psk::ref::Shape shape{1, 1, 1, int(n), int(h), int(dv)};
    std::vector<double> exact;
    psk::ref::softmaxAttention(shape, {q.begin(), q.end()}, {k.begin(), k.end()}, {v.begin(), v.end()}, 1.0, false, exact);
    std::vector<double> want(size_t(n) * dv);
    for (uint32_t i = 0; i < n; ++i) {
        double s[2], wmax = -1e300, den = 0;
        for (uint32_t j = 0; j < 2; ++j) {
            s[j] = 0;
            for (uint32_t d = 0; d < h; ++d) s[j] += double(q[i * h + d]) * k[j * h + d];
            wmax = std::max(wmax, s[j]);
        }
        double w[2];
        for (uint32_t j = 0; j < 2; ++j) {
            const double x = std::exp(s[j] - wmax);
            den += x;
            w[j] = psk::storage::quantize({float(x)}, type)[0];
        }
        for (uint32_t c = 0; c < dv; ++c) want[i * dv + c] = (w[0] * v[c] + w[1] * v[dv + c]) / den;
    }
    double maxExact = 0, gap = 0, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        maxExact = std::max(maxExact, std::fabs(exact[i]));
        gap = std::max(gap, std::fabs(exact[i] - want[i]));
        err = std::max(err, std::fabs(double(got[i]) - want[i]));
    }
    // The case discriminates (16-bit weights give 0, float32 ones ~6.1e-5) ...
    ASSERT_GT(maxExact, 5e-5);
    ASSERT_GT(gap, 0.5 * maxExact);
    // ... and the kernel computes with 16-bit operands: within a tenth of the gap.
    EXPECT_LE(err, 0.1 * gap) << "output " << got[0] << ", float64 with 16-bit weights " << want[0] << ", exact " << exact[0];
}

INSTANTIATE_TEST_SUITE_P(Types, CoopEmulationRounding,
                         ::testing::Combine(::testing::Values(PSK_DATA_TYPE_FLOAT16, PSK_DATA_TYPE_BFLOAT16), ::testing::Values("flash", "tiled")),
                         [](const ::testing::TestParamInfo<RoundingParam>& p) {
                             return std::string(std::get<0>(p.param) == PSK_DATA_TYPE_FLOAT16 ? "f16" : "bf16") + "_" + std::get<1>(p.param);
                         });

}  // namespace
