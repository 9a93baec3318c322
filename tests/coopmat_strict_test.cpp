// The emulated cooperative-matrix backend is strict (shaders/coopmat.glsl, "strict"): shared
// memory starts as NaN, and a load, store or product that breaks the extensions' rules (the whole
// subgroup present, a uniform offset and stride, 16-byte multiples) yields NaN. This test runs one
// product (coopmat_strict_check.comp) legally, which must be exact, and with each violation, which
// must give NaN: a kernel that a GPU driver may miscompile must not pass the conformance suite on
// lavapipe just because the emulation was lenient.
// The same kernel shows the emulated products' arithmetic (PSK_COOPMAT_EMULATED_PRODUCTS, vk/
// emulated_products.hpp): a product whose exact value float32 cannot hold comes out rounded to
// nearest by default and truncated as a tensor core truncates with "tensor-core", and a value the
// switch does not know fails the context's creation.
#include <gtest/gtest.h>
#include "kernels/kernel_pipeline.hpp"

#include <cmath>
#include <mutex>
#include <string>

#include "kernels/kernel_table.hpp"
#include "support/scoped_env.hpp"
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

/** Every element of the rounding product is +-`magnitude` (minus in odd columns); the first that is not, else "". */
std::string roundingMismatch(const std::vector<float>& c, float magnitude) {
    for (int r = 0; r < 16; ++r)
        for (int col = 0; col < 16; ++col) {
            const float want = (col & 1) ? -magnitude : magnitude;
            if (c[r * 16 + col] != want)
                return "C[" + std::to_string(r) + "][" + std::to_string(col) + "] = " + std::to_string(c[r * 16 + col]) + ", want " +
                       std::to_string(want);
        }
    return "";
}

// 2^24 + 1.5 rounded to nearest is 2^24 + 2.
TEST_F(ContextTest, EmulatedProductsRoundToNearestByDefault) {
    const std::vector<float> c = runCheck(ctx, PSK_STRICT_ROUNDING);
    if (c.empty()) GTEST_SKIP() << "the emulation needs a fixed subgroup of 4 or more lanes";
    EXPECT_EQ(roundingMismatch(c, 16777218.0f), "");
}

/** Messages of a context of the test's own. */
struct OwnLog {
    std::mutex mutex;
    std::vector<std::string> info, errors, validation;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        auto* log = static_cast<OwnLog*>(user);
        std::lock_guard<std::mutex> lock(log->mutex);
        (severity == PSK_MESSAGE_SEVERITY_VALIDATION ? log->validation
         : severity == PSK_MESSAGE_SEVERITY_ERROR    ? log->errors
                                                     : log->info)
            .emplace_back(message);
    }
};

PskResult createOwnContext(OwnLog& log, PskContext* context) {
    PskContextCreateInfo info{};
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    info.flags = require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &OwnLog::callback;
    info.messageUserData = &log;
    return pskCreateContext(&info, context);
}

// The tensor core's block: the 1.5 is cut away at the alignment to 2^24's exponent (multiples of 2).
TEST(EmulatedProducts, TensorCoreTruncates) {
    OwnLog log;
    PskContext context = nullptr;
    {
        psk::test::ScopedEnv products("PSK_COOPMAT_EMULATED_PRODUCTS", "tensor-core");
        ASSERT_EQ(createOwnContext(log, &context), PSK_SUCCESS);
    }
    const std::vector<float> c = runCheck(context, PSK_STRICT_ROUNDING);
    pskDestroyContext(context);
    if (c.empty()) GTEST_SKIP() << "the emulation needs a fixed subgroup of 4 or more lanes";
    EXPECT_EQ(roundingMismatch(c, 16777216.0f), "");
    bool said = false;
    for (const std::string& m : log.info) said = said || m.find("emulated cooperative products: tensor-core") != std::string::npos;
    EXPECT_TRUE(said) << "the context does not say which products it emulates";
    EXPECT_TRUE(log.validation.empty()) << log.validation.front();
}

TEST(EmulatedProducts, UnknownValueFailsTheContext) {
    OwnLog log;
    PskContext context = nullptr;
    psk::test::ScopedEnv products("PSK_COOPMAT_EMULATED_PRODUCTS", "tensorcore");
    EXPECT_EQ(createOwnContext(log, &context), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(context, nullptr);
    ASSERT_FALSE(log.errors.empty());
    EXPECT_NE(log.errors.back().find("PSK_COOPMAT_EMULATED_PRODUCTS=tensorcore: expected ieee, tensor-core, ieee+folded or tensor-core+folded"), std::string::npos)
        << log.errors.back();
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
