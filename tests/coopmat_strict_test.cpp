// The emulated cooperative-matrix backend is strict (shaders/coopmat.glsl, "strict"): shared
// memory starts as NaN, and a load, store or product that breaks the extensions' rules (the whole
// subgroup present, a uniform offset and stride, 16-byte multiples) yields NaN. This test runs one
// product (coopmat_strict_check.comp) legally, which must be exact, and with each violation, which
// must give NaN: a kernel that a GPU driver may miscompile must not pass the conformance suite on
// lavapipe just because the emulation was lenient.
#include <gtest/gtest.h>
#include "kernels/kernel_pipeline.hpp"

#include <cmath>

#include "kernels/kernel_table.hpp"
#include "support/test_context.hpp"
#include "vk/context.hpp"
#include "vk/memory.hpp"

namespace {

using psk::test::ContextTest;

struct Mode {
    uint32_t value;
    const char* name;
};

class CoopMatStrict : public ContextTest, public ::testing::WithParamInterface<Mode> {};

/** Runs the check kernel in `mode`; the 16 x 16 result, row-major (empty where it cannot run). */
std::vector<float> runCheck(PskContext ctx, uint32_t mode) {
    const psk::DeviceCaps& caps = ctx->caps();
    if (caps.subgroupSize < 4 || caps.minSubgroupSize != caps.maxSubgroupSize) return {};
    psk::kernel::CoopMatStrictCheckSpec spec;
    spec.THREADS = caps.subgroupSize;
    const psk::KernelChoice choice =
        psk::KernelChoice::make(psk::KernelId::CoopMatStrictCheck, "emu_f16", PSK_DATA_TYPE_FLOAT32, spec, "test");
    VkPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), choice);
    psk::Buffer out(ctx->allocator(), 16 * 16 * 4, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, psk::MemoryUsage::HostReadback);
    psk::kernel::CoopMatStrictCheckPush push{mode};
    ctx->execute([&](psk::Recorder& rec) {
        rec.dispatch(pipeline, {psk::writes({out.handle(), 0, 16 * 16 * 4})}, &push, sizeof push, 1);
    });
    const float* c = reinterpret_cast<const float*>(out.mapped());
    return std::vector<float>(c, c + 16 * 16);
}

double a(int r, int k) { return (r * 7 + k * 3) % 5 - 2; }
double b(int k, int c) { return (k * 5 + c) % 7 - 3; }

TEST_F(ContextTest, LegalCooperativeProductIsExact) {
    const std::vector<float> c = runCheck(ctx, PSK_STRICT_LEGAL);
    if (c.empty()) GTEST_SKIP() << "the emulation needs a fixed subgroup of 4 or more lanes";
    size_t wrong = 0;
    for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 16; ++col) {
            double want = 0;
            for (int k = 0; k < 16; ++k) want += a(r, k) * b(k, col);
            wrong += double(c[r * 16 + col]) != want;
        }
    EXPECT_EQ(wrong, 0u);
}

TEST_P(CoopMatStrict, ViolationGivesNaN) {
    const std::vector<float> c = runCheck(ctx, GetParam().value);
    if (c.empty()) GTEST_SKIP() << "the emulation needs a fixed subgroup of 4 or more lanes";
    size_t nan = 0;
    for (float x : c) nan += std::isnan(x);
    EXPECT_GT(nan, 0u) << GetParam().name << " passed unnoticed";
}

INSTANTIATE_TEST_SUITE_P(Violations, CoopMatStrict,
                         ::testing::Values(Mode{PSK_STRICT_DIVERGENT, "divergent"}, Mode{PSK_STRICT_NONUNIFORM, "nonuniform"},
                                           Mode{PSK_STRICT_MISALIGNED, "misaligned"}, Mode{PSK_STRICT_UNWRITTEN, "unwritten"},
                                           Mode{PSK_STRICT_STRIDE, "stride"}),
                         [](const ::testing::TestParamInfo<Mode>& p) { return std::string(p.param.name); });

}  // namespace
