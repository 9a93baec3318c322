// Conformance of the quadratic kernels (softmax, exact polynomial) against the float64 reference.
//
// Metric: relativeMaxError = max |gpu - ref| / max |ref| over the whole output. The reference runs
// on the inputs after rounding to the storage type, so the thresholds measure the kernel's float32
// arithmetic plus the rounding of the output alone: float32 kQuadraticFloat32 (about ten times the
// worst float32 error of the suite), float16 2e-3 (output ulp 2^-11 ~ 4.9e-4), bfloat16 1.2e-2
// (ulp 2^-8 ~ 3.9e-3). The cases and the thresholds are reference/conformance_cases.hpp's, shared
// with psk conformance; every case prints its error ("[ error ] ...", %.3e).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>

#include <unistd.h>

#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "support/host_forward.hpp"
#include "support/kernel_paths.hpp"
#include "support/scoped_env.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;

using Case = psk::conformance::BaselineCase;
using psk::conformance::name;

/** Runs case c on ctx and holds it to the float64 reference; *planOut gets the attention's plan. */
void checkCase(PskContext ctx, const Case& c, std::string* planOut = nullptr) {
    const uint64_t seed = psk::conformance::caseSeed(name(c));
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
    size_t planSize = 0;
    ASSERT_EQ(pskGetAttentionPlan(attn, nullptr, &planSize), PSK_SUCCESS);
    std::string plan(planSize, '\0');
    ASSERT_EQ(pskGetAttentionPlan(attn, plan.data(), &planSize), PSK_SUCCESS);
    if (planOut) *planOut = plan;

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
    const double limit = psk::conformance::threshold(c.type, psk::conformance::Family::Quadratic);
    ::testing::Test::RecordProperty("relative_max_error", psk::ref::formatError(err));
    psk::conformance::printError("quadratic", c.type, psk::test::planImplementations(plan), name(c), err, limit);
    EXPECT_LE(err, limit) << name(c);
}

class BaselineConformance : public ContextTest, public ::testing::WithParamInterface<Case> {};

TEST_P(BaselineConformance, MatchesFloat64Reference) { checkCase(ctx, GetParam()); }

INSTANTIATE_TEST_SUITE_P(Sweep, BaselineConformance, ::testing::ValuesIn(psk::conformance::baselineSweep()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

// The float32 shapes once more in 16-bit storage (float16 and bfloat16 in turn), with the 16-bit
// thresholds: the cooperative kernel (attention_tiled_coopmat.comp) takes only 16-bit storage, so
// this is the sweep its emulated run (PSK_COOPMAT_EMULATION=1, the coopmat_emulated. tests)
// exercises; in the normal run it covers the same shapes through the FP32 kernel.
INSTANTIATE_TEST_SUITE_P(Sweep16, BaselineConformance, ::testing::ValuesIn(psk::conformance::baselineSweep16()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

// The entries of the FlashAttention-2 kernel's GPU tiling table (lib/forward/tiled_forward.cpp,
// planAttentionFlashCoopMat) through the emulated backend with the GPU's tilings
// (PSK_COOPMAT_EMULATION=gpu-tiles), each forced by a tuning table's baselines.tile, on shapes
// that fit lavapipe's 32 KiB of shared memory: two row tiles per subgroup (entries 11-13) and one
// (2, 3, the H200 table's, and 7), one to four row groups, 16 to 64 keys per step, n not a
// multiple of any tile, causal and full, softmax and the polynomial, grouped-query heads, h = 16 to
// 64, a partial value tile, float16 and bfloat16, both layouts. Each pair is one the entry fits
// (the plan must apply it: an entry that fell back to the model's tiling would prove nothing
// here); that an entry which does not fit is ignored with its reason is coopmat_selection_test's.
struct FlashTilingCase {
    uint32_t entry, rowTiles;
    Case c;
};
class FlashTilings : public ContextTest, public ::testing::WithParamInterface<FlashTilingCase> {};

std::vector<FlashTilingCase> flashTilingCases() {
    Case a;  // softmax, causal, GQA, h = dv = 16
    a.type = PSK_DATA_TYPE_FLOAT16;
    a.causal = true, a.Hq = 2, a.Hkv = 1, a.n = 77, a.h = 16, a.dv = 16;
    Case b = a;  // the polynomial, full, two K steps, a partial value tile
    b.kind = PSK_ATTENTION_KIND_POLYNOMIAL, b.degree = 4, b.causal = false, b.Hkv = 2, b.h = 32, b.dv = 24;
    Case c = a;  // bfloat16, BNHD, n below two key tiles
    c.type = PSK_DATA_TYPE_BFLOAT16, c.layout = PSK_LAYOUT_BNHD, c.Hkv = 2, c.n = 40;
    Case d = a;  // the benchmarked head dim
    d.n = 130, d.h = 64, d.dv = 64;
    return {{3, 1, a}, {7, 1, a}, {11, 2, a}, {13, 2, a}, {2, 1, b}, {12, 2, b}, {11, 2, c}, {11, 2, d}, {12, 2, d}};
}

/** A tuning table of one line, `parameter value`, in a temporary file that PSK_TUNING_TABLE names while this lives. */
class OneLineTuningTable {
public:
    OneLineTuningTable(const char* parameter, uint32_t value)
        : path_((std::filesystem::temp_directory_path() /
                 (std::string("psk_") + parameter + std::to_string(value) + "_" + std::to_string(::getpid()) + ".tuning"))
                    .string()) {
        if (std::FILE* f = std::fopen(path_.c_str(), "w")) {
            std::fprintf(f, "psk-tuning 1\ndevice any\n%s %u\n", parameter, value);
            std::fclose(f);
        }
        env_.emplace("PSK_TUNING_TABLE", path_.c_str());
    }
    ~OneLineTuningTable() {
        env_.reset();
        std::filesystem::remove(path_);
    }
    bool written() const { return std::filesystem::exists(path_); }

private:
    std::string path_;
    std::optional<psk::test::ScopedEnv> env_;
};

TEST_P(FlashTilings, EntryMatchesFloat64Reference) {
    const FlashTilingCase t = GetParam();
    const OneLineTuningTable table("baselines.tile", t.entry);
    ASSERT_TRUE(table.written());
    psk::test::ScopedEnv emulation("PSK_COOPMAT_EMULATION", "gpu-tiles");
    std::string plan;
    checkCase(ctx, t.c, &plan);
    ASSERT_NE(plan.find("attention_flash_coopmat"), std::string::npos) << plan;
    EXPECT_NE(plan.find("baselines.tile=" + std::to_string(t.entry) + " from tuning table"), std::string::npos) << plan;
    EXPECT_NE(plan.find(" ROW_TILES=" + std::to_string(t.rowTiles)), std::string::npos) << plan;
    // The workgroup is SG_M subgroups of the device's lanes (16 under the lanes16. tests'
    // LP_NATIVE_VECTOR_WIDTH=512 on llvmpipe, else 8 there, 32 on NVIDIA).
    PskDeviceInfo device{};
    ASSERT_EQ(pskGetDeviceInfo(ctx, &device), PSK_SUCCESS);
    auto value = [&](const std::string& key) {
        const size_t at = plan.find(" " + key + "=", plan.find("attention_flash_coopmat"));
        return at == std::string::npos ? 0ul : std::stoul(plan.substr(at + key.size() + 2));
    };
    EXPECT_EQ(value("THREADS"), device.subgroupSize * value("SG_M")) << plan;
    // The emulated shape (16 x 16 x 16, or PSK_COOPMAT_EMULATION_SHAPE's: the coopmat_shape_ runs).
    unsigned m = 16, n = 16, k = 16;
    if (const char* shape = std::getenv("PSK_COOPMAT_EMULATION_SHAPE"); shape && *shape)
        ASSERT_EQ(std::sscanf(shape, "%ux%ux%u", &m, &n, &k), 3) << shape;
    EXPECT_EQ(value("CM_M") * 10000 + value("CM_N") * 100 + value("CM_K"), m * 10000 + n * 100 + k) << plan;
    const char* width = std::getenv("LP_NATIVE_VECTOR_WIDTH");
    if (width && std::string(width) == "512" && std::string(device.name).find("llvmpipe") != std::string::npos)
        EXPECT_EQ(device.subgroupSize, 16u) << "LP_NATIVE_VECTOR_WIDTH=512 did not give llvmpipe 16 lanes";
}

// The entries of the FP32 FlashAttention-2 kernel's tiling table (attention_flash_fp32.comp;
// lib/forward/tiled_forward.cpp, kFlashFp32Table), each forced by a tuning table's
// baselines.fp32_tile (the sweeps above run the model's choices: entry 1 at h <= 64 on lavapipe, 3
// at dv = 80, 6 at h = 128, and the one-row kernel at h = 256), on shapes whose tiles fit lavapipe's 32 KiB: 16
// to 64 rows, 32 or 64 keys per step, 8 or 16 invocations per row group, 4 or 8 rows per
// invocation, n not a multiple of a tile, h and dv not multiples of 4 (the zero padding of the
// last vec4), value columns that leave some invocations idle (dv = 24: six vec4 columns for
// eight), grouped-query heads, both layouts, all three storage types. (Entry 9 is entry 8 with 8
// rows, which entry 10 has too.)
struct Fp32TilingCase {
    uint32_t entry;
    Case c;
};
class FlashFp32Tilings : public ContextTest, public ::testing::WithParamInterface<Fp32TilingCase> {};

std::vector<Fp32TilingCase> flashFp32TilingCases() {
    Case a;  // softmax, causal, GQA, h = dv = 32
    a.causal = true, a.Hq = 2, a.Hkv = 1, a.n = 77, a.h = 32, a.dv = 32;
    Case b = a;  // the polynomial, full, BNHD, h = 48 (13 vec4s), dv = 24
    b.kind = PSK_ATTENTION_KIND_POLYNOMIAL, b.degree = 4, b.causal = false, b.layout = PSK_LAYOUT_BNHD, b.h = 48, b.dv = 24;
    Case c = a;  // h and dv not multiples of 4, degree 2, float16
    c.kind = PSK_ATTENTION_KIND_POLYNOMIAL, c.degree = 2, c.type = PSK_DATA_TYPE_FLOAT16, c.n = 45, c.h = 18, c.dv = 6;
    Case d = a;  // h = dv = 16, full, bfloat16, n past two 64-key tiles
    d.causal = false, d.type = PSK_DATA_TYPE_BFLOAT16, d.n = 150, d.h = 16, d.dv = 16;
    Case e = a;  // ten 32-row groups, 64-key steps
    e.n = 300;
    Case f = a;  // the benchmarked head dim, dv = 80 (three vec4 columns per invocation)
    f.n = 130, f.h = 64, f.dv = 80;
    return {{0, a}, {0, b}, {0, c}, {1, a}, {1, b}, {2, a}, {3, f}, {4, d}, {5, e}, {6, f}, {6, c}, {7, d}, {8, f}, {10, b}};
}

TEST_P(FlashFp32Tilings, EntryMatchesFloat64Reference) {
    const Fp32TilingCase t = GetParam();
    const OneLineTuningTable table("baselines.fp32_tile", t.entry);
    ASSERT_TRUE(table.written());
    psk::test::ScopedEnv emulation("PSK_COOPMAT_EMULATION", nullptr);  // 16-bit storage on the FP32 units
    std::string plan;
    checkCase(ctx, t.c, &plan);
    ASSERT_NE(plan.find("attention_flash_fp32"), std::string::npos) << plan;
    EXPECT_NE(plan.find("baselines.fp32_tile=" + std::to_string(t.entry) + " from tuning table"), std::string::npos) << plan;
}

INSTANTIATE_TEST_SUITE_P(Fp32Table, FlashFp32Tilings, ::testing::ValuesIn(flashFp32TilingCases()),
                         [](const ::testing::TestParamInfo<Fp32TilingCase>& info) {
                             return "tile" + std::to_string(info.param.entry) + "_" + name(info.param.c);
                         });

INSTANTIATE_TEST_SUITE_P(GpuTable, FlashTilings, ::testing::ValuesIn(flashTilingCases()),
                         [](const ::testing::TestParamInfo<FlashTilingCase>& info) {
                             return "tile" + std::to_string(info.param.entry) + "_" + name(info.param.c);
                         });

}  // namespace
