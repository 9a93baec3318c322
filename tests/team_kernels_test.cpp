// Lane-team kernels (lib/team_kernels.hpp) and the generic kernels on the same device, each held
// to the float64 reference (psk::ref::polysketchAttention with the very sketch the library
// generates from the seed): the whole forward with the team variants, then with
// PSK_DISABLE_TEAM_KERNELS=1, same inputs and sketch. The shapes are the team kernels' edges that
// the conformance sweep leaves out: value dims 4 (one vec4 per lane, seven lanes idle), 100 and 128
// (four vec4s per lane), feature counts that are not a multiple of 64, fewer keys than lanes, and
// the element-wise value path (token strides that are not a multiple of 4) in every storage type
// next to the vec4 path.
//
// Metric: relativeMaxError against the float64 reference on the inputs rounded to the storage
// type, with the polysketch conformance threshold of the storage type
// (reference/conformance_cases.hpp). The two kernel sets are not compared with each other: they
// sum the same float32 terms in another order, so they differ by as much as each differs from the
// float64 reference (both 2e-7 to 1e-6 in float32 here), and an error common to both would pass
// such a comparison; the generic kernels run here to take the same edge shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

#include "vk/context.hpp"
#include "kernels/team_kernels.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "reference/storage_types.hpp"
#include "sketch/sketch_weights.hpp"
#include "support/host_forward.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;

struct Case {
    uint32_t r = 16, b = 32, h = 32, dv = 32, B = 1, Hq = 2, Hkv = 1, n = 70;
    bool causal = true, localExact = false;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    PskLayout layout = PSK_LAYOUT_BHND;
    uint32_t tokenPad = 0;
};

std::string name(const Case& c) {
    std::ostringstream s;
    s << (c.type == PSK_DATA_TYPE_FLOAT32 ? "f32" : c.type == PSK_DATA_TYPE_FLOAT16 ? "f16" : "bf16") << "_r" << c.r << "_b" << c.b
      << "_h" << c.h << "_dv" << c.dv << "_n" << c.n << (c.causal ? "_causal" : "_full") << (c.localExact ? "_localexact" : "")
      << (c.layout == PSK_LAYOUT_BNHD ? "_bnhd" : "_bhnd") << "_B" << c.B << "_Hq" << c.Hq << "_Hkv" << c.Hkv;
    if (c.tokenPad) s << "_pad" << c.tokenPad;
    return s.str();
}

/** Sets PSK_DISABLE_TEAM_KERNELS for its lifetime, then restores the previous value. */
class DisableTeamKernels {
public:
    explicit DisableTeamKernels(bool disable) {
        if (const char* old = std::getenv(kName)) saved_ = old, hadValue_ = true;
        setenv(kName, disable ? "1" : "0", 1);
    }
    ~DisableTeamKernels() {
        if (hadValue_) setenv(kName, saved_.c_str(), 1);
        else unsetenv(kName);
    }

private:
    static constexpr const char* kName = "PSK_DISABLE_TEAM_KERNELS";
    std::string saved_;
    bool hadValue_ = false;
};

class TeamKernels : public ContextTest, public ::testing::WithParamInterface<Case> {};

// The sweep below skips devices without team kernels; on lavapipe (the CI device) they must run,
// or a lost capability (shaderInt64 not enabled, a missing subgroup operation) would turn every
// case into a silent skip.
TEST_F(ContextTest, TeamKernelsRunOnLavapipe) {
    PskDeviceInfo info{};
    pskGetDeviceInfo(ctx, &info);
    if (std::string(info.driverName) != "llvmpipe") GTEST_SKIP() << "not lavapipe";
    DisableTeamKernels enable(false);
    EXPECT_TRUE(psk::useTeamKernels(ctx->caps()))
        << "lavapipe should run the lane-team kernels (8-lane subgroups with shuffle and arithmetic, shaderInt64 enabled)";
}

TEST_P(TeamKernels, TeamAndGenericMatchFloat64Reference) {
    const Case c = GetParam();
    {
        DisableTeamKernels enable(false);
        if (!psk::useTeamKernels(ctx->caps())) GTEST_SKIP() << "this device runs the generic kernels only";
    }
    const uint64_t seed = psk::conformance::caseSeed(name(c));
    const auto q = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hq * c.n * c.h, seed + 1), c.type);
    const auto k = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, seed + 2), c.type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, seed + 3), c.type);

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = (c.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
    info.degree = 4;
    info.scale = 1.0f / std::sqrt(float(c.h));
    info.numQueryHeads = c.Hq;
    info.numKeyValueHeads = c.Hkv;
    info.headDim = c.h;
    info.valueDim = c.dv;
    info.dataType = c.type;
    info.layout = c.layout;
    info.sketchSize = c.r;
    info.blockSize = c.b;
    info.seed = seed;

    // The float64 reference with the very sketch the library generates from the seed.
    psk::ref::PolysketchConfig config;
    config.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(seed, info.degree, c.h, c.r)));
    config.degree = int(info.degree);
    config.scale = info.scale;
    config.causal = c.causal;
    config.localExact = c.localExact;
    config.blockSize = int(c.b);
    const psk::ref::Shape shape{int(c.B), int(c.Hq), int(c.Hkv), int(c.n), int(c.h), int(c.dv)};
    std::vector<double> want;
    psk::ref::polysketchAttention(shape, std::vector<double>(q.begin(), q.end()), std::vector<double>(k.begin(), k.end()),
                                  std::vector<double>(v.begin(), v.end()), config, want);
    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    ASSERT_GT(maxRef, 1e-3) << "degenerate reference output";

    psk::test::HostForward forward;
    forward.layout = {c.B, c.n, c.layout, c.tokenPad};
    forward.type = c.type;
    forward.Hq = c.Hq;
    forward.Hkv = c.Hkv;
    forward.h = c.h;
    forward.dv = c.dv;
    forward.explicitStrides = c.tokenPad != 0;
    // Runs the forward; `plan` receives the kernels it planned.
    auto run = [&](bool disableTeam, std::string& plan) {
        DisableTeamKernels env(disableTeam);  // read when the attention object plans its kernels
        PskAttention attn = nullptr;
        EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        if (!attn) return std::vector<float>{};
        size_t size = 0;
        EXPECT_EQ(pskGetAttentionPlan(attn, nullptr, &size), PSK_SUCCESS);
        plan.assign(size, '\0');
        EXPECT_EQ(pskGetAttentionPlan(attn, plan.data(), &size), PSK_SUCCESS);
        const std::vector<float> out = forward.run(attn, q, k, v);
        pskDestroyAttention(attn);
        return out;
    };
    std::string teamPlan, genericPlan;
    const std::vector<float> team = run(false, teamPlan), generic = run(true, genericPlan);
    // Every case is inside all three team kernels' limits (p = 4 random sketch, h, dv and r
    // multiples of 4, h and dv <= 128), so each run must have taken the kernels it is named after.
    for (const char* kernel : {"sketch_features_team.", "block_states_team.", "polysketch_output_team."})
        EXPECT_NE(teamPlan.find(kernel), std::string::npos) << teamPlan;
    EXPECT_EQ(genericPlan.find("(team)"), std::string::npos) << genericPlan;
    ASSERT_FALSE(team.empty());
    ASSERT_FALSE(generic.empty());
    const double threshold = psk::conformance::threshold(c.type, psk::conformance::Family::Polysketch);
    const double teamError = psk::test::relativeMaxError(team, want), genericError = psk::test::relativeMaxError(generic, want);
    RecordProperty("relative_max_error", psk::ref::formatError(teamError));  // team against float64
    RecordProperty("relative_max_error_generic", psk::ref::formatError(genericError));
    EXPECT_LE(teamError, threshold) << "team kernels against the float64 reference";
    EXPECT_LE(genericError, threshold) << "generic kernels against the float64 reference";
}

std::vector<Case> cases() {
    std::vector<Case> out;
    Case c;
    c.dv = 4;  // C4 = 1, lanes 1..7 own no value column
    out.push_back(c);
    c = Case{};
    c.dv = 128;  // C4 = 4, every lane full
    c.r = 8;     // F = 36
    c.n = 45;
    c.b = 16;
    out.push_back(c);
    c = Case{};
    c.dv = 100;  // C4 = 4, lane 6 partly and lane 7 wholly past the value columns
    c.r = 12;    // F = 78: a full and a partial workgroup of features
    c.n = 37;
    c.causal = false;
    out.push_back(c);
    c = Case{};
    c.r = 32;  // F = 528
    c.dv = 64;
    c.n = 7;  // fewer keys than lanes, one short block
    c.type = PSK_DATA_TYPE_BFLOAT16;
    c.tokenPad = 1;  // token stride 65: element-wise values
    out.push_back(c);
    c.type = PSK_DATA_TYPE_FLOAT16;
    c.n = 19;
    c.tokenPad = 2;  // token stride 66
    c.dv = 64;
    c.r = 8;  // F = 36
    c.B = 2;
    c.Hkv = 2;
    out.push_back(c);
    c.tokenPad = 0;  // vec4 values (two 16-bit pairs per load)
    c.layout = PSK_LAYOUT_BNHD;
    c.r = 16;
    out.push_back(c);
    c.type = PSK_DATA_TYPE_BFLOAT16;
    c.dv = 36;  // C4 = 2
    c.n = 33;
    c.localExact = true;
    out.push_back(c);
    c.type = PSK_DATA_TYPE_FLOAT32;
    c.layout = PSK_LAYOUT_BHND;
    c.tokenPad = 3;  // odd token stride, head rows not on a vec4 either
    c.localExact = false;
    out.push_back(c);
    // 8-float loads (u64vec4) and their fallbacks:
    c = Case{};
    c.r = 40;  // F = 820; S(k) rows longer than 32: the states read sketch entries one by one
    c.h = 64;  // q, k rows 8 floats per load in the feature map, k' rows in the output
    c.dv = 64;  // v rows 8 floats per load (states and output), Z rows too
    c.n = 75;
    c.localExact = true;
    out.push_back(c);
    c.tokenPad = 4;  // token stride 68: rows on a vec4 but not on 8 floats (vec4 loads)
    c.r = 32;
    out.push_back(c);
    c = Case{};
    c.h = 36;  // 9 vec4s per row: no 8-float pairs for q, k, k'
    c.dv = 40;  // C4 = 2, but value pairs of lanes 5..7 past the row: the row's last pair
    c.r = 20;
    c.n = 50;
    c.localExact = true;
    out.push_back(c);
    return out;
}

INSTANTIATE_TEST_SUITE_P(Shapes, TeamKernels, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return name(i.param); });

}  // namespace
