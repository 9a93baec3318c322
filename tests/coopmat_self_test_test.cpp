// The cooperative kernels' run-time switches and start-up self-test (lib/forward/coopmat_switches.hpp,
// coopmat_self_test.hpp) on lavapipe: the cooperative kernels run through the emulated backend, a
// fault is injected into one stage's cooperative kernel (PSK_COOPMAT_FAULT), and the user must still
// get output that matches the float64 reference, with the kernel disabled, a message, and a verdict.
// A control run without the self-test shows that the injected fault does break the output (so the
// protected run's pass means something).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "forward/attention.hpp"
#include "forward/coopmat_self_test.hpp"
#include "forward/coopmat_switches.hpp"
#include "reference/conformance_cases.hpp"
#include "reference/reference.hpp"
#include "reference/storage_types.hpp"
#include "sketch/sketch_weights.hpp"
#include "support/host_forward.hpp"
#include "reference/sketch_fixtures.hpp"
#include "support/test_context.hpp"
#include "vk/context.hpp"

namespace {

using psk::test::ContextTest;

/** Sets environment variables for one scope and restores them after. */
class EnvScope {
public:
    using Values = std::map<std::string, std::string>;
    explicit EnvScope(const Values& values) {
        for (const auto& [name, value] : values) {
            const char* old = std::getenv(name.c_str());
            saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
            setenv(name.c_str(), value.c_str(), 1);
        }
    }
    ~EnvScope() {
        for (const auto& [name, old] : saved_) {
            if (old) setenv(name.c_str(), old->c_str(), 1);
            else unsetenv(name.c_str());
        }
    }

private:
    std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

/** Collects the context's INFO messages (the self-test speaks at that level). */
struct InfoLog {
    std::vector<std::string> messages;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        if (severity == PSK_MESSAGE_SEVERITY_INFO) static_cast<InfoLog*>(user)->messages.emplace_back(message);
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) ADD_FAILURE() << "validation message: " << message;
    }
};

struct Shape {
    uint32_t Hq = 2, Hkv = 1, n = 77, h = 16, dv = 24, r = 16, b = 32;
};

PskAttentionCreateInfo createInfo(PskAttentionKind kind, const Shape& s, uint64_t seed, PskDataType type = PSK_DATA_TYPE_FLOAT16) {
    PskAttentionCreateInfo info{};
    info.kind = kind;
    info.flags = PSK_ATTENTION_CAUSAL_BIT;
    info.degree = 4;
    info.scale = 1.0f / std::sqrt(float(s.h));
    info.numQueryHeads = s.Hq;
    info.numKeyValueHeads = s.Hkv;
    info.headDim = s.h;
    info.valueDim = s.dv;
    info.dataType = type;
    info.sketchSize = s.r;
    info.blockSize = s.b;
    info.seed = seed;
    return info;
}

/** The plan's kernel lines, without its "# " comment lines (switches, self-test verdicts). */
std::string kernelLines(const std::string& plan) {
    std::string out;
    size_t begin = 0;
    while (begin < plan.size()) {
        size_t end = plan.find('\n', begin);
        if (end == std::string::npos) end = plan.size();
        if (plan.compare(begin, 2, "# ") != 0) out += plan.substr(begin, end - begin + 1);
        begin = end + 1;
    }
    return out;
}

struct Outcome {
    bool created = false;
    std::string plan;     // the kernel lines
    std::string comments; // the whole text, comments included
    double error = 0;       // conformance metric against the float64 reference
    double firstBlockError = 0;  // the same over the first block's rows alone
    size_t nonFinite = 0;
    std::vector<std::string> messages;
};

/**
 * Creates a context of its own (to see its messages), the attention, runs it, and compares with the
 * reference (causal; polysketch exact inside each block with `localExact`).
 */
Outcome runCase(PskAttentionKind kind, PskDataType type = PSK_DATA_TYPE_FLOAT16, bool localExact = false) {
    Outcome o;
    const Shape s;
    const uint64_t seed = 20261126;
    InfoLog log;
    PskContextCreateInfo ci{};
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    ci.flags = require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    ci.messageCallback = &InfoLog::callback;
    ci.messageUserData = &log;
    PskContext ctx = nullptr;
    EXPECT_EQ(pskCreateContext(&ci, &ctx), PSK_SUCCESS);
    if (!ctx) return o;
    PskAttentionCreateInfo info = createInfo(kind, s, seed, type);
    if (localExact) info.flags |= PSK_ATTENTION_LOCAL_EXACT_BIT;
    PskAttention attn = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &attn), PSK_SUCCESS);
    if (attn) {
        o.created = true;
        size_t size = 0;
        pskGetAttentionPlan(attn, nullptr, &size);
        o.comments.assign(size, '\0');
        pskGetAttentionPlan(attn, o.comments.data(), &size);
        o.plan = kernelLines(o.comments);
        const auto q = psk::storage::quantize(psk::test::randomNormal(size_t(s.Hq) * s.n * s.h, seed + 1), type);
        const auto k = psk::storage::quantize(psk::test::randomNormal(size_t(s.Hkv) * s.n * s.h, seed + 2), type);
        const auto v = psk::storage::quantize(psk::test::randomNormal(size_t(s.Hkv) * s.n * s.dv, seed + 3), type);
        psk::test::HostForward forward;
        forward.layout = {1, s.n, PSK_LAYOUT_BHND, 0};
        forward.type = type;
        forward.Hq = s.Hq;
        forward.Hkv = s.Hkv;
        forward.h = s.h;
        forward.dv = s.dv;
        const std::vector<float> got = forward.run(attn, q, k, v);
        EXPECT_FALSE(got.empty());
        const psk::ref::Shape shape{1, int(s.Hq), int(s.Hkv), int(s.n), int(s.h), int(s.dv)};
        std::vector<double> qd(q.begin(), q.end()), kd(k.begin(), k.end()), vd(v.begin(), v.end()), want;
        if (kind == PSK_ATTENTION_KIND_SOFTMAX) {
            psk::ref::softmaxAttention(shape, qd, kd, vd, info.scale, true, want);
        } else {
            psk::ref::PolysketchConfig config;
            config.sketch = psk::ref::sketchFunction(psk::test::toReference(psk::generateRandomSketch(seed, 4, s.h, s.r)));
            config.degree = 4;
            config.scale = info.scale;
            config.causal = true;
            config.blockSize = int(s.b);
            config.localExact = localExact;
            psk::ref::polysketchAttention(shape, qd, kd, vd, config, want);
        }
        for (float x : got) o.nonFinite += std::isfinite(x) ? 0 : 1;
        o.error = got.size() == want.size() ? psk::test::relativeMaxError(got, want) : INFINITY;
        if (got.size() == want.size()) {  // [Hq][n][dv]: the rows t < b of every head
            std::vector<float> got0;
            std::vector<double> want0;
            for (size_t i = 0; i < got.size(); ++i)
                if ((i / s.dv) % s.n < s.b) {
                    got0.push_back(got[i]);
                    want0.push_back(want[i]);
                }
            o.firstBlockError = psk::test::relativeMaxError(got0, want0);
        }
        pskDestroyAttention(attn);
    }
    pskDestroyContext(ctx);
    o.messages = log.messages;
    return o;
}

const char* variantOf(const char* stage) {
    const std::string s(stage);
    if (s == "features") return "sketch_features_coopmat.emu_";
    if (s == "states") return "block_states_coopmat.emu_";
    if (s == "output") return "polysketch_output_coopmat.emu_";
    return "attention_flash_coopmat.emu_";  // 16-bit data: the FlashAttention-2 kernel
}

PskAttentionKind kindOf(const char* stage) {
    return std::string(stage) == "baselines" ? PSK_ATTENTION_KIND_SOFTMAX : PSK_ATTENTION_KIND_POLYSKETCH;
}

double limit(PskAttentionKind kind) {
    return psk::conformance::threshold(PSK_DATA_TYPE_FLOAT16, kind == PSK_ATTENTION_KIND_SOFTMAX ? psk::conformance::Family::Quadratic
                                                                                                   : psk::conformance::Family::Polysketch);
}

class CoopSelfTest : public ::testing::TestWithParam<const char*> {
protected:
    void SetUp() override { psk::clearCoopSelfTestVerdicts(); }
};

// The control: the injected fault, unchecked, breaks the output (non-finite values).
TEST_P(CoopSelfTest, InjectedFaultBreaksTheOutputWithoutTheSelfTest) {
    const char* stage = GetParam();
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "0"}, {"PSK_COOPMAT_FAULT", stage}});
    const Outcome o = runCase(kindOf(stage));
    ASSERT_TRUE(o.created);
    EXPECT_NE(o.plan.find(variantOf(stage)), std::string::npos) << o.plan;
    EXPECT_GT(o.nonFinite, 0u) << "the injected fault did not reach the output: this test would prove nothing";
}

// With the self-test, the user gets correct output: the stage's kernel is disabled (the plan says
// why), the other stages keep theirs, a message says so, and the verdict is listed.
TEST_P(CoopSelfTest, BrokenKernelIsDisabledAndTheOutputStaysCorrect) {
    const char* stage = GetParam();
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "force"}, {"PSK_COOPMAT_FAULT", stage}});
    const Outcome o = runCase(kindOf(stage));
    ASSERT_TRUE(o.created);
    EXPECT_EQ(o.plan.find(variantOf(stage)), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("failed its self-test"), std::string::npos) << o.plan;
    if (kindOf(stage) == PSK_ATTENTION_KIND_POLYSKETCH)
        for (const char* other : {"features", "states", "output"})
            if (std::string(other) != stage) EXPECT_NE(o.plan.find(variantOf(other)), std::string::npos) << other << "\n" << o.plan;
    EXPECT_EQ(o.nonFinite, 0u);
    EXPECT_LE(o.error, limit(kindOf(stage))) << o.plan;
    bool said = false;
    for (const std::string& m : o.messages) said = said || (m.find("disagrees with the generic kernel") != std::string::npos && m.find(stage) != std::string::npos);
    EXPECT_TRUE(said) << "no message through the callback";
    EXPECT_NE(o.comments.find(std::string("# self-test: ") + variantOf(stage)), std::string::npos) << o.comments;
    EXPECT_NE(o.comments.find("FAILED, disabled on this device"), std::string::npos) << o.comments;
}

INSTANTIATE_TEST_SUITE_P(Stages, CoopSelfTest, ::testing::Values("features", "states", "output", "baselines"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

// Float32 storage on the split cooperative kernels (PSK_COOPMAT_FLOAT32=on) is guarded the same way:
// its float32 variants are probed on their own (a verdict per variant), a broken one is disabled
// and the output stays within the float32 threshold.
TEST(CoopSelfTestFloat32, BrokenSplitKernelIsDisabledAndTheOutputStaysCorrect) {
    psk::clearCoopSelfTestVerdicts();
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_FLOAT32", "on"}, {"PSK_COOPMAT_SELFTEST", "force"},
                                  {"PSK_COOPMAT_FAULT", "states"}});
    const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH, PSK_DATA_TYPE_FLOAT32);
    ASSERT_TRUE(o.created);
    EXPECT_EQ(o.plan.find("block_states_coopmat.emu_"), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("polysketch_output_coopmat.emu_f16.f32"), std::string::npos) << o.plan;
    EXPECT_NE(o.plan.find("failed its self-test"), std::string::npos) << o.plan;
    EXPECT_NE(o.comments.find("# self-test: block_states_coopmat.emu_f16.f32"), std::string::npos) << o.comments;
    EXPECT_NE(o.comments.find("FAILED, disabled on this device"), std::string::npos) << o.comments;
    EXPECT_EQ(o.nonFinite, 0u);
    EXPECT_LE(o.error, psk::conformance::kPolysketchFloat32) << o.plan;
    psk::clearCoopSelfTestVerdicts();
}

// Kernels that agree pass, stay in the plan, and each verdict is cached (a second attention runs no probe).
TEST(CoopSelfTestVerdicts, AgreeingKernelsPassAndAreCached) {
    psk::clearCoopSelfTestVerdicts();
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "force"}});
    const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH);
    ASSERT_TRUE(o.created);
    for (const char* stage : {"features", "states", "output"}) EXPECT_NE(o.plan.find(variantOf(stage)), std::string::npos) << o.plan;
    EXPECT_LE(o.error, limit(PSK_ATTENTION_KIND_POLYSKETCH));
    PskContext ctx = psk::test::sharedContext();
    ASSERT_NE(ctx, nullptr);
    const std::vector<psk::CoopSelfTestVerdict> first = psk::coopSelfTestVerdicts(ctx->caps());
    // Features, output, and the block states twice: the per-block kernel and the walking one (the
    // emulation's small tiles plan both), each probed running itself.
    ASSERT_EQ(first.size(), 4u);
    uint32_t walking = 0;
    for (const auto& v : first) {
        EXPECT_TRUE(v.passed) << v.kernel << ": " << v.detail;
        walking += v.kernel.find("WALK=1") != std::string::npos;
    }
    EXPECT_EQ(walking, 1u);
    (void)runCase(PSK_ATTENTION_KIND_POLYSKETCH);
    EXPECT_EQ(psk::coopSelfTestVerdicts(ctx->caps()).size(), 4u) << "the second attention ran the probes again";
}

// The emulated backend is not self-tested by default (only kernels a GPU driver compiled are).
TEST(CoopSelfTestVerdicts, EmulatedKernelsAreNotTestedByDefault) {
    psk::clearCoopSelfTestVerdicts();
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "1"}, {"PSK_COOPMAT_FAULT", "features"}});
    const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH);
    ASSERT_TRUE(o.created);
    EXPECT_NE(o.plan.find(variantOf("features")), std::string::npos) << o.plan;
    EXPECT_TRUE(psk::coopSelfTestVerdicts(psk::test::sharedContext()->caps()).empty());
}

// PSK_COOPMAT_SELFTEST=known (psk tune's candidates): a variant the process found wrong stays
// disabled, whatever mode found it; nothing new is probed.
TEST(CoopSelfTestVerdicts, KnownModeKeepsVerdictsAndProbesNothing) {
    psk::clearCoopSelfTestVerdicts();
    PskContext ctx = psk::test::sharedContext();
    ASSERT_NE(ctx, nullptr);
    size_t found = 0;
    {
        EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "force"}, {"PSK_COOPMAT_FAULT", "features"}});
        const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH);
        ASSERT_TRUE(o.created);
        EXPECT_EQ(o.plan.find(variantOf("features")), std::string::npos) << o.plan;
        found = psk::coopSelfTestVerdicts(ctx->caps()).size();
        ASSERT_GT(found, 0u);
    }
    {
        EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "known"}, {"PSK_COOPMAT_FAULT", "features"}});
        const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH);
        ASSERT_TRUE(o.created);
        EXPECT_EQ(o.plan.find(variantOf("features")), std::string::npos) << "the verdict of the forced self-test holds:\n" << o.plan;
        EXPECT_EQ(o.nonFinite, 0u);
        EXPECT_EQ(psk::coopSelfTestVerdicts(ctx->caps()).size(), found) << "a probe ran";
    }
    psk::clearCoopSelfTestVerdicts();
    {
        EnvScope env(EnvScope::Values{{"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "known"}, {"PSK_COOPMAT_FAULT", "features"}});
        const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH);
        ASSERT_TRUE(o.created);
        EXPECT_NE(o.plan.find(variantOf("features")), std::string::npos) << "nothing known, nothing probed:\n" << o.plan;
        EXPECT_TRUE(psk::coopSelfTestVerdicts(ctx->caps()).empty());
    }
}

// ---- The switches ----

TEST(CoopMatSwitches, AblateValues) {
    uint32_t st = 9, out = 9;
    std::string error;
    uint32_t ft = 9;
    ASSERT_TRUE(psk::parseAblate(nullptr, &st, &out, &ft, &error));
    EXPECT_EQ(st, 0u);
    EXPECT_EQ(out, 0u);
    EXPECT_EQ(ft, 0u);
    ASSERT_TRUE(psk::parseAblate("states.products,states.loads,output.local,output.products", &st, &out, &ft, &error)) << error;
    EXPECT_EQ(st, 5u);
    EXPECT_EQ(out, 6u);
    EXPECT_EQ(ft, 0u);
    ASSERT_TRUE(psk::parseAblate("states.expand,output.inter", &st, &out, &ft, &error)) << error;
    EXPECT_EQ(st, 2u);
    EXPECT_EQ(out, 1u);
    ASSERT_TRUE(psk::parseAblate("output.zrange,output.expand,output.zstage,output.kvstage", &st, &out, &ft, &error)) << error;
    EXPECT_EQ(st, 0u);
    EXPECT_EQ(out, 120u);
    ASSERT_TRUE(psk::parseAblate("features.products,features.local", &st, &out, &ft, &error)) << error;
    EXPECT_EQ(out, 0u);
    EXPECT_EQ(ft, 5u);
    ASSERT_TRUE(psk::parseAblate("features.loads", &st, &out, &ft, &error)) << error;
    EXPECT_EQ(ft, 2u);
    EXPECT_FALSE(psk::parseAblate("states.products,scan.loads", &st, &out, &ft, &error));
    EXPECT_NE(error.find("PSK_ABLATE: unknown part 'scan.loads'"), std::string::npos) << error;
    psk::CoopMatSwitches sw;
    sw.ablateStates = 1;
    EXPECT_EQ(psk::describeCoopMatSwitches(sw), "ABLATED states 1, output 0 (timing only: the output is wrong)");
    sw.ablateFeatures = 4;
    EXPECT_EQ(psk::describeCoopMatSwitches(sw), "ABLATED states 1, output 0, features 4 (timing only: the output is wrong)");
}

// Each ablation reaches its kernel (ABLATE in the plan) and changes the output: left out, the part
// is missing from it (the emulated kernels, self-test off); the output stays finite but where an
// operand is never staged (psi, phi(q), the Z chunk, the key tile: the products read the
// emulation's poisoned shared memory) or where the Z chunk's scale is the unset maximum's 0. With Z
// staged by the output (PSK_COOPMAT_Z_PACKED=off), as the GPU check ablates it: packed Z has no range
// pass or staging of its own to leave out.
TEST(CoopMatAblations, EachPartLeftOutChangesTheOutput) {
    for (const char* part : {"states.products", "states.expand", "output.inter", "output.local", "output.products", "output.zrange",
                             "output.expand", "output.zstage", "output.kvstage"}) {
        SCOPED_TRACE(part);
        EnvScope env(EnvScope::Values{
            {"PSK_COOPMAT_EMULATION", "1"}, {"PSK_COOPMAT_SELFTEST", "0"}, {"PSK_COOPMAT_Z_PACKED", "off"}, {"PSK_ABLATE", part}});
        const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH);
        ASSERT_TRUE(o.created);
        const bool states = std::string(part).rfind("states", 0) == 0;
        const std::string variant = states ? "block_states_coopmat.emu_" : "polysketch_output_coopmat.emu_";
        const size_t at = o.plan.find(variant);
        ASSERT_NE(at, std::string::npos) << o.plan;
        EXPECT_EQ(o.plan.substr(at, o.plan.find('\n', at) - at).find(" ABLATE=0"), std::string::npos) << o.plan;
        EXPECT_NE(o.comments.find("ABLATED"), std::string::npos) << o.comments;
        const std::string name(part);
        if (name == "states.expand" || name == "output.zrange" || name == "output.expand" || name == "output.zstage" ||
            name == "output.kvstage") {
            // An operand never staged: the products read the emulation's poisoned (NaN) shared
            // memory; or (zrange) the Z chunk scaled by 0 and its scale undone as infinity.
            EXPECT_GT(o.nonFinite, 0u) << "the ablation changed nothing: this test would prove nothing";
        } else {
            EXPECT_EQ(o.nonFinite, 0u);
            EXPECT_GT(o.error, 10 * limit(PSK_ATTENTION_KIND_POLYSKETCH)) << "the ablation changed nothing: this test would prove nothing";
        }
    }
}

// The generic kernels take the same ablations (the FP32 forward, and the generic stages of a 16-bit
// plan, are all generic on a GPU without a fitting cooperative kernel): each part reaches its
// kernel's ABLATE and leaves its part out where it should. Causal, exact inside each block, so that
// the first block's rows are the local part alone: what only the phi(q)^T Z part reads (the states,
// Z, phi(q), the sketches) leaves them as they were and changes every later block; the local part,
// the key and value tiles and the staged rows change the first block too.
TEST(GenericAblations, EachPartLeftOutChangesTheOutputWhereItShould) {
    struct Part {
        const char* name;
        const char* kernel;    // the plan line's kernel
        bool firstBlockKept;   // the first block's rows as without the ablation
    };
    const Part parts[] = {{"output.inter", "polysketch_output", true},   {"output.local", "polysketch_output", false},
                          {"output.expand", "polysketch_output", true},  {"output.zstage", "polysketch_output", true},
                          {"output.kvstage", "polysketch_output", false}, {"states.products", "block_states.", true},
                          {"states.expand", "block_states.", true},      {"states.loads", "block_states.", true},
                          {"features.products", "sketch_features.", true}, {"features.loads", "sketch_features.", false},
                          {"features.local", "sketch_features.", false}};
    for (const char* output : {"rows", "tiles"})
        for (const Part& part : parts) {
            const std::string name(part.name);
            if (std::string(output) == "tiles" && name.rfind("output.", 0) != 0) continue;  // the output's variants only
            SCOPED_TRACE(std::string(output) + " " + name);
            EnvScope env(EnvScope::Values{{"PSK_DISABLE_COOPMAT", "1"}, {"PSK_DISABLE_TEAM_KERNELS", "1"}, {"PSK_GENERIC_OUTPUT", output},
                                          {"PSK_ABLATE", part.name}});
            const Outcome o = runCase(PSK_ATTENTION_KIND_POLYSKETCH, PSK_DATA_TYPE_FLOAT16, true);
            ASSERT_TRUE(o.created);
            std::string kernel = part.kernel;
            if (kernel == "polysketch_output") kernel += std::string(output) == "rows" ? "_rows." : ".";
            const size_t at = o.plan.find(kernel);
            ASSERT_NE(at, std::string::npos) << o.plan;
            const std::string line = o.plan.substr(at, o.plan.find('\n', at) - at);
            EXPECT_NE(line.find("(generic)"), std::string::npos) << line;
            EXPECT_EQ(line.find(" ABLATE=0"), std::string::npos) << line;
            EXPECT_NE(o.comments.find("ABLATED"), std::string::npos) << o.comments;
            if (name == "features.local") {
                // The local rows never written: the workspace as handed over (NaN where the tests
                // poison it) or whatever it held.
                EXPECT_TRUE(o.nonFinite > 0 || o.error > 10 * limit(PSK_ATTENTION_KIND_POLYSKETCH)) << o.error;
                continue;
            }
            EXPECT_EQ(o.nonFinite, 0u);
            EXPECT_GT(o.error, 10 * limit(PSK_ATTENTION_KIND_POLYSKETCH)) << "the ablation changed nothing: this test would prove nothing";
            if (part.firstBlockKept)
                EXPECT_LT(o.firstBlockError, limit(PSK_ATTENTION_KIND_POLYSKETCH)) << "the ablation reached the local part";
            else
                EXPECT_GT(o.firstBlockError, 10 * limit(PSK_ATTENTION_KIND_POLYSKETCH)) << "the ablation missed the local part";
        }
}

TEST(CoopMatSwitches, FeatureDiagnosticValues) {
    uint32_t d = 7;
    std::string error;
    ASSERT_TRUE(psk::parseFeatureDiagnostic(nullptr, &d, &error));
    EXPECT_EQ(d, 0u);
    const char* names[] = {"off", "rows", "identity", "product", "accumulators", "operands"};
    for (uint32_t i = 0; i < 6; ++i) {
        ASSERT_TRUE(psk::parseFeatureDiagnostic(names[i], &d, &error)) << names[i];
        EXPECT_EQ(d, i);
    }
    EXPECT_FALSE(psk::parseFeatureDiagnostic("weights", &d, &error));
    EXPECT_NE(error.find("PSK_COOPMAT_FEATURE_DIAGNOSTIC=weights: expected off, rows, identity, product, accumulators or operands"), std::string::npos) << error;
    psk::CoopMatSwitches s;
    s.featureDiagnostic = 3;
    EXPECT_EQ(psk::describeCoopMatSwitches(s), "FEATURE-MAP DIAGNOSTIC 3 (the S rows are not S)");
}

TEST(CoopMatSwitches, ParsesEveryValueAndRefusesUnknownOnes) {
    psk::CoopMatSwitches s;
    std::string error;
    ASSERT_TRUE(psk::parseCoopMatSwitches(nullptr, nullptr, nullptr, nullptr, nullptr, &s, &error));
    EXPECT_EQ(s.backend, psk::CoopBackendRequest::Auto);
    EXPECT_EQ(s.stages, uint32_t(psk::kCoopAllStages));
    EXPECT_EQ(s.selfTest, psk::CoopSelfTestMode::Hardware);
    EXPECT_EQ(s.featureTerms, 3u);
    EXPECT_EQ(psk::describeCoopMatSwitches(s), "");
    ASSERT_TRUE(psk::parseCoopMatSwitches("nv", "features,output", "0", "1", "states", &s, &error));
    EXPECT_EQ(s.backend, psk::CoopBackendRequest::NV);
    EXPECT_EQ(s.stages, uint32_t(psk::kCoopFeatures | psk::kCoopOutput));
    EXPECT_EQ(s.selfTest, psk::CoopSelfTestMode::Off);
    EXPECT_EQ(s.featureTerms, 1u);
    EXPECT_EQ(s.faultStages, uint32_t(psk::kCoopStates));
    EXPECT_EQ(psk::describeCoopMatSwitches(s), "backend nv, stages features,output, self-test off, feature-map products 1, FAULT INJECTED in states");
    ASSERT_TRUE(psk::parseCoopMatSwitches("khr", "none", "force", "3", "", &s, &error));
    EXPECT_EQ(s.stages, 0u);
    EXPECT_EQ(s.selfTest, psk::CoopSelfTestMode::Always);
    ASSERT_TRUE(psk::parseCoopMatSwitches(nullptr, nullptr, "known", nullptr, nullptr, &s, &error));
    EXPECT_EQ(s.selfTest, psk::CoopSelfTestMode::Known);
    EXPECT_FALSE(psk::parseCoopMatSwitches("cuda", nullptr, nullptr, nullptr, nullptr, &s, &error));
    EXPECT_NE(error.find("PSK_COOPMAT_BACKEND=cuda"), std::string::npos) << error;
    EXPECT_FALSE(psk::parseCoopMatSwitches(nullptr, "features,scan", nullptr, nullptr, nullptr, &s, &error));
    EXPECT_NE(error.find("'scan'"), std::string::npos) << error;
    EXPECT_FALSE(psk::parseCoopMatSwitches(nullptr, nullptr, "yes", nullptr, nullptr, &s, &error));
    EXPECT_FALSE(psk::parseCoopMatSwitches(nullptr, nullptr, nullptr, "2", nullptr, &s, &error));
    EXPECT_FALSE(psk::parseCoopMatSwitches(nullptr, nullptr, nullptr, nullptr, "everything", &s, &error));
}

class CoopMatSwitchPlans : public ContextTest {};

std::string planOf(PskContext ctx, PskAttentionKind kind, PskResult* result = nullptr);
std::string planOfAll(PskContext ctx, PskAttentionKind kind, PskResult* result) {
    const PskAttentionCreateInfo info = createInfo(kind, Shape{}, 7);
    PskAttention attn = nullptr;
    const PskResult r = pskCreateAttention(ctx, &info, &attn);
    if (result) *result = r;
    if (!attn) return {};
    size_t size = 0;
    pskGetAttentionPlan(attn, nullptr, &size);
    std::string plan(size, '\0');
    pskGetAttentionPlan(attn, plan.data(), &size);
    pskDestroyAttention(attn);
    return plan;
}
std::string planOf(PskContext ctx, PskAttentionKind kind, PskResult* result) { return kernelLines(planOfAll(ctx, kind, result)); }

// Each stage list selects exactly those stages' cooperative kernels (emulated here).
TEST_F(CoopMatSwitchPlans, StagesSelectTheCooperativeKernels) {
    for (const char* stage : {"features", "states", "output", "baselines"}) {
        EnvScope env(EnvScope::Values{{"PSK_COOPMAT_BACKEND", "emulated"}, {"PSK_COOPMAT_STAGES", stage}});
        const std::string poly = planOf(ctx, PSK_ATTENTION_KIND_POLYSKETCH), soft = planOf(ctx, PSK_ATTENTION_KIND_SOFTMAX);
        for (const char* other : {"features", "states", "output"})
            EXPECT_EQ(poly.find(variantOf(other)) != std::string::npos, std::string(other) == stage) << stage << "\n" << poly;
        EXPECT_EQ(soft.find(variantOf("baselines")) != std::string::npos, std::string(stage) == "baselines") << soft;
        EXPECT_NE((poly + soft).find("PSK_COOPMAT_STAGES leaves out"), std::string::npos);
    }
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_BACKEND", "emulated"}, {"PSK_COOPMAT_FEATURE_TERMS", "1"}});
    EXPECT_NE(planOf(ctx, PSK_ATTENTION_KIND_POLYSKETCH).find("PRODUCT_TERMS=1"), std::string::npos);
}

// khr / nv on a device without them (lavapipe) leave the scalar kernels, saying why (on a device
// with them, that backend's kernels); off and a misspelled value behave as documented.
TEST_F(CoopMatSwitchPlans, BackendRequests) {
    PskDeviceInfo device{};
    ASSERT_EQ(pskGetDeviceInfo(ctx, &device), PSK_SUCCESS);
    for (const char* backend : {"khr", "nv", "off"}) {
        EnvScope env(EnvScope::Values{{"PSK_COOPMAT_BACKEND", backend}});
        const std::string plan = planOf(ctx, PSK_ATTENTION_KIND_POLYSKETCH);
        const bool has = (std::string(backend) == "khr" && device.cooperativeMatrixKHR) ||
                         (std::string(backend) == "nv" && device.cooperativeMatrixNV);
        if (has)
            EXPECT_NE(plan.find(std::string("_coopmat.") + backend + "_"), std::string::npos) << backend << "\n" << plan;
        else
            EXPECT_EQ(plan.find("_coopmat."), std::string::npos) << backend << "\n" << plan;
    }
    {
        EnvScope env(EnvScope::Values{{"PSK_COOPMAT_BACKEND", "emulated"}});
        EXPECT_NE(planOf(ctx, PSK_ATTENTION_KIND_POLYSKETCH).find(variantOf("states")), std::string::npos);
    }
    EnvScope env(EnvScope::Values{{"PSK_COOPMAT_BACKEND", "tensorcores"}});
    PskResult r = PSK_SUCCESS;
    EXPECT_TRUE(planOf(ctx, PSK_ATTENTION_KIND_POLYSKETCH, &r).empty());
    EXPECT_EQ(r, PSK_ERROR_INVALID_ARGUMENT);
    psk::test::sharedLog().clear();  // the refused creation reported its error
}

}  // namespace
