// The walking cooperative block states (shaders/block_states_coopmat.comp, WALK = 1 causal, 2 full;
// PolysketchPlan::statesWalkKernel): when the plan offers them, what PSK_COOPMAT_STATES_WALK does,
// and that a walk computes what the per-block kernel and the scan compute, with the emulation's
// tiling and the GPU's. The conformance sweep's emulated run (small tiles: the walk is the default
// there) holds the walk to the float64 reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "support/host_forward.hpp"
#include "support/test_context.hpp"
#include "support/scoped_env.hpp"

namespace {

using psk::test::ScopedEnv;

PskAttentionCreateInfo polysketchInfo(bool causal, PskDataType type) {
    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = causal ? PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT : 0u;
    info.numQueryHeads = 2;
    info.numKeyValueHeads = 1;
    info.headDim = 32;
    info.valueDim = 40;
    info.sketchSize = 16;
    info.blockSize = 32;
    info.dataType = type;
    return info;
}

bool hasWalk(const std::string& plan, const char* walk) {
    return plan.find("block_states_coopmat.emu_f16.f16") != std::string::npos && plan.find(walk) != std::string::npos;
}

using StatesWalk = psk::test::ContextTest;

// Under the emulation's small tiles the walk is planned by default (causal WALK=1, full WALK=2),
// beside the per-block kernel (WALK=0) a call continuing a decode state takes; =off plans none;
// float32 storage takes no cooperative kernel at all.
TEST_F(StatesWalk, PlannedUnderEmulationAndSwitchedOff) {
    ScopedEnv emulation("PSK_COOPMAT_EMULATION", "1");
    {
        ScopedEnv walk("PSK_COOPMAT_STATES_WALK", nullptr);
        const std::string causal = psk::test::attentionPlan(ctx, polysketchInfo(true, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(hasWalk(causal, "WALK=1 ABLATE=0 SPLIT_V=0: walking the blocks")) << causal;
        EXPECT_NE(causal.find("WALK=0 ABLATE=0 SPLIT_V=0: "), std::string::npos) << causal;
        const std::string full = psk::test::attentionPlan(ctx, polysketchInfo(false, PSK_DATA_TYPE_FLOAT16));
        EXPECT_TRUE(hasWalk(full, "WALK=2 ABLATE=0 SPLIT_V=0: walking the blocks")) << full;
        const std::string f32 = psk::test::attentionPlan(ctx, polysketchInfo(true, PSK_DATA_TYPE_FLOAT32));
        EXPECT_EQ(f32.find("WALK="), std::string::npos) << f32;
    }
    {
        ScopedEnv walk("PSK_COOPMAT_STATES_WALK", "off");
        const std::string causal = psk::test::attentionPlan(ctx, polysketchInfo(true, PSK_DATA_TYPE_FLOAT16));
        EXPECT_EQ(causal.find("walking the blocks"), std::string::npos) << causal;
        EXPECT_NE(causal.find("states walk off"), std::string::npos) << causal;  // the plan's switches line
    }
}

// A misspelled value fails attention creation instead of silently measuring something else.
TEST_F(StatesWalk, MisspelledSwitchIsAnError) {
    ScopedEnv walk("PSK_COOPMAT_STATES_WALK", "yes");
    PskAttentionCreateInfo info = polysketchInfo(true, PSK_DATA_TYPE_FLOAT16);
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(attn, nullptr);
    psk::test::sharedLog().clear();  // the refused creation reported its error
}

// The same inputs through the walk and through the per-block kernel and the scan (several blocks,
// an odd tail block, causal and full): they differ only in the order of the float32 additions of
// the block sums, so the outputs agree to the float16 rounding of the output. `emulation`: the
// emulation's own small tiles (one subgroup along the features) or the GPU's tiling (several).
void walkEqualsPerBlockAndScan(PskContext ctx, const char* emulation) {
    ScopedEnv mode("PSK_COOPMAT_EMULATION", emulation);
    // The other stages on their generic kernels: the emulated ones would only cost compile time.
    ScopedEnv stages("PSK_COOPMAT_STAGES", "states");
    const uint32_t n = 4 * 32 + 5, h = 16, dv = 40;
    for (bool causal : {true, false}) {
        PskAttentionCreateInfo info = polysketchInfo(causal, PSK_DATA_TYPE_FLOAT16);
        info.headDim = h;
        std::mt19937_64 rng(causal ? 11 : 12);
        std::normal_distribution<float> normal(0.f, 1.f);
        auto fill = [&](uint32_t heads, uint32_t dim) {
            std::vector<float> x(size_t(heads) * n * dim);
            for (float& e : x) e = normal(rng);
            return x;
        };
        const std::vector<float> q = fill(2, h), k = fill(1, h), v = fill(1, dv);
        std::vector<float> out[2];
        for (int walkOn = 0; walkOn < 2; ++walkOn) {
            ScopedEnv walk("PSK_COOPMAT_STATES_WALK", walkOn ? "on" : "off");
            PskAttention attn = nullptr;
            ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
            const std::string plan = psk::test::attentionPlan(ctx, info);
            EXPECT_EQ(plan.find(causal ? "WALK=1 ABLATE=0 SPLIT_V=0: walking" : "WALK=2 ABLATE=0 SPLIT_V=0: walking") != std::string::npos, walkOn == 1) << plan;
            psk::test::HostForward fwd;
            fwd.layout = {1, n, PSK_LAYOUT_BHND, 0};
            fwd.type = PSK_DATA_TYPE_FLOAT16;
            fwd.Hq = 2;
            fwd.Hkv = 1;
            fwd.h = h;
            fwd.dv = dv;
            out[walkOn] = fwd.run(attn, q, k, v);
            pskDestroyAttention(attn);
            ASSERT_FALSE(out[walkOn].empty());
        }
        double maxRef = 0, maxDiff = 0;
        for (size_t i = 0; i < out[0].size(); ++i) {
            ASSERT_TRUE(std::isfinite(out[1][i])) << i;
            maxRef = std::max(maxRef, double(std::fabs(out[0][i])));
            maxDiff = std::max(maxDiff, double(std::fabs(out[1][i] - out[0][i])));
        }
        ASSERT_GT(maxRef, 1e-3);
        // Both outputs are rounded to float16 (ulp 2^-11 relative): one ulp of the largest value.
        EXPECT_LE(maxDiff / maxRef, 1e-3) << (causal ? "causal" : "full") << " under PSK_COOPMAT_EMULATION=" << emulation;
    }
}

// The emulation's small tiles: the GPU's tiling walking (which no conformance case plans, since
// the GPU rule walks only with 400 workgroups or more) took ~95 s on lavapipe with a cold shader
// cache for what the small tiles already cover (the walk's code is the same for every tiling; the
// per-block kernel's GPU tiling runs in coopmat_gpu_tiles.), so the GPU check runs it instead, on
// the device's own cooperative matrices (tools/gpu_run/check.sh, conformance_polysketch_test.states_walk).
TEST_F(StatesWalk, WalkEqualsPerBlockAndScan) { walkEqualsPerBlockAndScan(ctx, "1"); }

}  // namespace
