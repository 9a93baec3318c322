// Conformance of the polysketch forward over many blocks at the default block size (b = 256,
// n = 8269: 33 blocks), head dims 128 and 256, value dims up to 256, against the float64 reference
// (reference/conformance_cases.hpp, polysketchLongSweep). The sweeps of conformance_polysketch_test
// stop at 6 blocks of b <= 100 and h <= 64; a fused or retiled kernel that is wrong only past a
// few blocks (a carry, a block index, the scan's many-block column path), at wide heads or at the
// default b would pass them.
//
// Each case runs on the kernel paths lavapipe runs for it (pathsOf), inside one test so that the
// float64 reference is computed once: the library's default (lane-team kernels where they apply),
// the generic kernels, and for 16-bit storage the emulated cooperative kernels (the strict
// emulated backend of shaders/coopmat.glsl) with their own tiling or with the GPU's. A path whose
// kernels are those of a path already run is not run again; a path that runs none of its own
// kernels fails (a path that silently fell back would test nothing). Every path runs in some case:
// LongConformanceCases.CoverEveryPathAndShape.
//
// Metric and thresholds: reference/conformance_cases.hpp, as in conformance_polysketch_test.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <map>

#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "reference/storage_types.hpp"
#include "sketch/sketch_weights.hpp"
#include "support/host_forward.hpp"
#include "support/kernel_paths.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::KernelPath;
using Case = psk::conformance::PolysketchCase;
using psk::conformance::name;

std::string attentionPlan(PskAttention attn) {
    size_t size = 0;
    if (pskGetAttentionPlan(attn, nullptr, &size) != PSK_SUCCESS) return {};
    std::string plan(size, '\0');
    if (pskGetAttentionPlan(attn, plan.data(), &size) != PSK_SUCCESS) return {};
    return plan;
}

/**
 * The kernel paths a case runs: the default and the generic ones always (the default only where a
 * lane-team kernel takes the shape); for 16-bit storage one of the two emulated cooperative
 * tilings, float16 the emulation's own and bfloat16 the GPU's. Each tiling thus runs over many
 * blocks at dv = 256 (the slowest runs here, ~8 s each on two cores) without every 16-bit case
 * paying for both; the small-tile emulation also runs the cooperative output (h = 128, dv = 64),
 * which the GPU's tiles do not fit in lavapipe's shared memory.
 */
std::vector<KernelPath> pathsOf(const Case& c) {
    std::vector<KernelPath> paths{KernelPath::Default, KernelPath::Generic};
    if (c.type == PSK_DATA_TYPE_FLOAT16) paths.push_back(KernelPath::Emulated);
    if (c.type == PSK_DATA_TYPE_BFLOAT16) paths.push_back(KernelPath::GpuTiles);
    return paths;
}

/** Whether `plan` runs the kernels that make `path` a path of its own. */
bool runsOwnKernels(KernelPath path, const std::string& plan) {
    switch (path) {
        case KernelPath::Default: return plan.find(" (team)") != std::string::npos;
        case KernelPath::Generic:
            return plan.find(" (team)") == std::string::npos && plan.find(" (cooperative)") == std::string::npos;
        case KernelPath::Emulated:
        case KernelPath::GpuTiles: return plan.find(" (cooperative)") != std::string::npos;
    }
    return false;
}

class LongConformance : public ContextTest, public ::testing::WithParamInterface<Case> {};

TEST_P(LongConformance, EveryKernelPathMatchesFloat64Reference) {
    const Case c = GetParam();
    ASSERT_EQ(c.source, psk::conformance::SketchSource::Seed);
    ASSERT_GT(c.n, 32 * c.b) << "a long case has more than 32 blocks";
    const uint64_t seed = psk::conformance::caseSeed(name(c));
    const auto q = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hq * c.n * c.h, seed + 1), c.type);
    const auto k = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.h, seed + 2), c.type);
    const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(c.B) * c.Hkv * c.n * c.dv, seed + 3), c.type);
    const float scale = 1.0f / std::sqrt(float(c.h));

    PskAttentionCreateInfo info{};
    info.kind = PSK_ATTENTION_KIND_POLYSKETCH;
    info.flags = (c.causal ? PSK_ATTENTION_CAUSAL_BIT : 0) | (c.localExact ? PSK_ATTENTION_LOCAL_EXACT_BIT : 0);
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

    psk::ref::PolysketchConfig config;
    config.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(seed, c.degree, c.h, c.r)));
    config.degree = int(c.degree);
    config.scale = scale;
    config.causal = c.causal;
    config.localExact = c.localExact;
    config.blockSize = int(c.b);
    const psk::ref::Shape shape{int(c.B), int(c.Hq), int(c.Hkv), int(c.n), int(c.h), int(c.dv)};
    std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
    auto since = [](std::chrono::steady_clock::time_point t0) {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    const auto referenceStart = std::chrono::steady_clock::now();
    psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
    std::printf("[ long ] %s: float64 reference %.1f s\n", name(c).c_str(), since(referenceStart));
    double maxRef = 0;
    for (double x : want) maxRef = std::max(maxRef, std::fabs(x));
    ASSERT_GT(maxRef, 1e-3) << "reference output is degenerate; the test would prove nothing";
    const double threshold = psk::conformance::threshold(c.type, psk::conformance::Family::Polysketch);

    std::map<std::string, KernelPath> ran;  // kernels (planKernels) -> the path that ran them
    for (KernelPath path : pathsOf(c)) {
        SCOPED_TRACE(psk::test::kernelPathName(path));
        const psk::test::KernelPathScope scope(path);
        const auto pathStart = std::chrono::steady_clock::now();
        PskAttention attn = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
        const std::string plan = attentionPlan(attn);
        const std::string kernels = psk::test::planKernels(plan);
        if (path == KernelPath::Default && !runsOwnKernels(path, plan)) {
            pskDestroyAttention(attn);  // no lane-team kernel takes this shape: the generic path covers it
            continue;
        }
        EXPECT_TRUE(runsOwnKernels(path, plan)) << "the path runs none of its kernels:\n" << plan;
        if (const auto same = ran.find(kernels); same != ran.end()) {
            std::printf("[ long ] %s: %s runs the kernels of %s\n", name(c).c_str(), psk::test::kernelPathName(path),
                        psk::test::kernelPathName(same->second));
            pskDestroyAttention(attn);
            continue;
        }
        ran.emplace(kernels, path);
        psk::test::HostForward forward;
        forward.layout = {c.B, c.n, c.layout, c.tokenPad};
        forward.type = c.type;
        forward.Hq = c.Hq;
        forward.Hkv = c.Hkv;
        forward.h = c.h;
        forward.dv = c.dv;
        const std::vector<float> got = forward.run(attn, q, k, v);
        pskDestroyAttention(attn);
        ASSERT_FALSE(got.empty());
        // Creation and the forward: on a CPU driver mostly the pipelines' first compilation (cached on disk after).
        std::printf("[ long ] %s: %s path %.1f s\n", name(c).c_str(), psk::test::kernelPathName(path), since(pathStart));
        const double error = psk::test::relativeMaxError(got, want);
        psk::conformance::printError("polysketch", c.type, psk::test::planImplementations(plan),
                                     name(c) + "@" + psk::test::kernelPathName(path), error, threshold);
        RecordProperty(std::string("relative_max_error_") + psk::test::kernelPathName(path), psk::ref::formatError(error));
        EXPECT_LE(error, threshold) << name(c) << " on the " << psk::test::kernelPathName(path) << " path";
    }
}

// Every kernel path runs on some long case of every storage type it takes, and the cases cover
// h = 128 and 256, dv = 256 in float32 and 16-bit storage, b = 256 and more than 32 blocks.
TEST(LongConformanceCases, CoverEveryPathAndShape) {
    std::map<std::string, int> covered;
    for (const Case& c : psk::conformance::polysketchLongSweep()) {
        EXPECT_EQ(c.b, 256u);
        EXPECT_GT(c.n, 32 * c.b);
        const std::string storage = c.type == PSK_DATA_TYPE_FLOAT32 ? "f32" : "16-bit";
        for (KernelPath path : pathsOf(c)) ++covered[std::string(psk::test::kernelPathName(path)) + " " + storage];
        ++covered["h" + std::to_string(c.h) + " " + storage];
        if (c.dv == 256) ++covered["dv256 " + storage];
    }
    for (const char* want : {"default f32", "generic f32", "default 16-bit", "generic 16-bit", "emulated 16-bit", "gpu-tiles 16-bit",
                             "h128 f32", "h256 f32", "h128 16-bit", "h256 16-bit", "dv256 f32", "dv256 16-bit"})
        EXPECT_GT(covered[want], 0) << want;
}

INSTANTIATE_TEST_SUITE_P(Long, LongConformance, ::testing::ValuesIn(psk::conformance::polysketchLongSweep()),
                         [](const ::testing::TestParamInfo<Case>& info) { return name(info.param); });

}  // namespace
