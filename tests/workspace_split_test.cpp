// A forward's workspace split into several buffers, so that a workspace larger than one allocation
// may hold still runs: under a context whose largest allocation
// (PskContextCreateInfo::maxAllocationSize) is smaller than the workspace but holds every region,
// host forwards of every polysketch configuration (local exact, full, learned,
// degree 8 with its node scratch, GQA, float16), a baseline with key chunks, a prefill and a
// forward continuing a decode state must equal the uncapped context's bit for bit, in more than
// one buffer; a region larger than the cap fails with TOO_LARGE and writes nothing; the recorded
// form with several app buffers (pskGetWorkspaceLayout's sizes) equals the host form, and bad
// buffer lists fail with their codes before anything is recorded. Out of device memory at the
// second buffer (a deviceMemoryLimit) frees what the call allocated; a varlen batch splits too.
#include <polysketch/polysketch_vulkan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "forward/attention.hpp"  // internals: how many buffers the last host call used
#include "io/safetensors.hpp"
#include "sketch/sketch_files.hpp"
#include "support/app_vulkan.hpp"
#include "reference/reference.hpp"
#include "reference/sketch_fixtures.hpp"
#include "support/handles.hpp"
#include "support/test_context.hpp"
#include "util/float16.hpp"
#include "vk/context.hpp"

namespace {

using psk::test::ContextTest;
using psk::test::MessageLog;

// Every region and tensor of the shapes below fits it; each workspace is several times larger.
constexpr uint64_t kCap = 512 << 10;

struct Spec {
    const char* name;
    PskAttentionKind kind = PSK_ATTENTION_KIND_POLYSKETCH;
    PskAttentionCreateFlags flags = PSK_ATTENTION_CAUSAL_BIT;
    uint32_t degree = 4, r = 16, b = 64, h = 32, dv = 32, Hq = 4, Hkv = 2, B = 1, n = 512;
    PskDataType type = PSK_DATA_TYPE_FLOAT32;
    bool learned = false;
};

using Context = psk::test::Context;
using Attention = psk::test::Attention;
using State = psk::test::DecodeState;

/** A validated context of its own with the given allocation cap (0: the device's) and memory limit. */
Context cappedContext(uint64_t cap, MessageLog& log, uint64_t deviceMemoryLimit = 0) {
    PskContextCreateInfo info{};
    info.deviceMemoryLimit = deviceMemoryLimit;
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    info.flags = require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &MessageLog::callback;
    info.messageUserData = &log;
    info.maxAllocationSize = cap;
    PskContext c = nullptr;
    EXPECT_EQ(pskCreateContext(&info, &c), PSK_SUCCESS);
    return Context(c);
}

Attention makeAttention(PskContext ctx, const Spec& s, const std::string& sketchFile) {
    PskAttentionCreateInfo info{};
    info.kind = s.kind;
    info.flags = s.flags;
    info.degree = s.kind == PSK_ATTENTION_KIND_SOFTMAX ? 0 : s.degree;
    info.numQueryHeads = s.Hq;
    info.numKeyValueHeads = s.Hkv;
    info.headDim = s.h;
    info.valueDim = s.dv;
    info.dataType = s.type;
    info.sketchSize = s.r;
    info.blockSize = s.b;
    info.seed = 11;
    if (s.learned) {
        info.sketchSource = PSK_SKETCH_SOURCE_LEARNED_FILE;
        info.sketchFile = sketchFile.c_str();
    }
    PskAttention a = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &info, &a), PSK_SUCCESS);
    return Attention(a);
}

/** Inputs of a call in the storage type (bytes), q, k, v. */
struct Inputs {
    std::vector<uint8_t> q, k, v;
    size_t outBytes = 0;
};

std::vector<uint8_t> storage(const std::vector<float>& x, PskDataType type) {
    const size_t eb = type == PSK_DATA_TYPE_FLOAT32 ? 4 : 2;
    std::vector<uint8_t> out(x.size() * eb);
    for (size_t i = 0; i < x.size(); ++i) {
        if (type == PSK_DATA_TYPE_FLOAT32) {
            std::memcpy(&out[i * 4], &x[i], 4);
        } else {
            const uint16_t u = type == PSK_DATA_TYPE_FLOAT16 ? psk::floatToHalf(x[i]) : psk::floatToBf16(x[i]);
            std::memcpy(&out[i * 2], &u, 2);
        }
    }
    return out;
}

Inputs makeInputs(const Spec& s, uint64_t seed) {
    const size_t eb = s.type == PSK_DATA_TYPE_FLOAT32 ? 4 : 2;
    Inputs in;
    in.q = storage(psk::test::randomNormal(size_t(s.B) * s.Hq * s.n * s.h, seed, 0.5f), s.type);
    in.k = storage(psk::test::randomNormal(size_t(s.B) * s.Hkv * s.n * s.h, seed + 1, 0.5f), s.type);
    in.v = storage(psk::test::randomNormal(size_t(s.B) * s.Hkv * s.n * s.dv, seed + 2), s.type);
    in.outBytes = size_t(s.B) * s.Hq * s.n * s.dv * eb;
    return in;
}

PskForwardHostInfo hostInfo(const Spec& s, const Inputs& in, std::vector<uint8_t>& out) {
    out.assign(in.outBytes, 0xAB);
    PskForwardHostInfo f{};
    f.batchSize = s.B;
    f.seqLen = s.n;
    f.q = in.q.data();
    f.k = in.k.data();
    f.v = in.v.data();
    f.out = out.data();
    f.qBytes = in.q.size();
    f.kBytes = in.k.size();
    f.vBytes = in.v.size();
    f.outBytes = out.size();
    return f;
}

std::string lastError(const MessageLog& log) { return log.errors.empty() ? "" : log.errors.back(); }

void expectNoValidation(MessageLog& log) {
    for (const std::string& m : log.validation) ADD_FAILURE() << "validation message: " << m;
}

/** The largest region of a call's workspace on `attention` (internal layout), and its total. */
std::pair<uint64_t, uint64_t> regionSpan(PskAttention a, const Spec& s) {
    const psk::ForwardGeometry g =
        psk::makeForwardGeometry(a->config(), a->context()->caps(), s.B, s.n, nullptr, nullptr, nullptr, nullptr);
    const psk::WorkspaceLayout L = a->workspaceLayout(g);
    uint64_t largest = 0;
    for (const psk::WorkspaceRegion& r : L.regions) largest = std::max<uint64_t>(largest, r.size);
    return {largest, L.contiguousBytes()};
}

class WorkspaceSplit : public ContextTest, public ::testing::WithParamInterface<Spec> {};

TEST_P(WorkspaceSplit, HostForwardEqualsUncappedInSeveralBuffers) {
    const Spec& s = GetParam();
    psk::test::TempFile sketchFile("psk_split_sketch");
    if (s.learned) psk::writeSafeTensors(sketchFile.path(), psk::learnedSketchToSafeTensors(psk::test::randomLearnedSketch(s.h, s.r, 5)));
    MessageLog log;
    const Context capped = cappedContext(kCap, log);
    ASSERT_TRUE(capped);
    PskDeviceInfo dev{};
    ASSERT_EQ(pskGetDeviceInfo(capped.get(), &dev), PSK_SUCCESS);
    EXPECT_EQ(dev.maxAllocationSize, kCap);

    const Attention whole = makeAttention(ctx, s, sketchFile.path()), split = makeAttention(capped.get(), s, sketchFile.path());
    ASSERT_TRUE(whole && split);
    const auto [largest, total] = regionSpan(whole.get(), s);
    ASSERT_LE(largest, kCap) << "the shape's largest region must fit the cap";
    ASSERT_GT(total, kCap) << "the shape's workspace must exceed the cap";

    const Inputs in = makeInputs(s, 40);
    std::vector<uint8_t> expected, got;
    PskForwardHostInfo f = hostInfo(s, in, expected);
    ASSERT_EQ(pskAttentionForwardHost(whole.get(), &f), PSK_SUCCESS) << lastError(psk::test::sharedLog());
    EXPECT_EQ(whole->lastWorkspaceBufferCount(), 1u);
    f = hostInfo(s, in, got);
    ASSERT_EQ(pskAttentionForwardHost(split.get(), &f), PSK_SUCCESS) << lastError(log);
    EXPECT_GT(split->lastWorkspaceBufferCount(), 1u) << "the workspace was not split";
    EXPECT_TRUE(got == expected) << "the split workspace changed the output";

    // The public query agrees with what the host form allocated.
    PskWorkspaceLayoutInfo li{};
    li.batchSize = s.B;
    li.seqLen = s.n;
    uint32_t count = 0;
    ASSERT_EQ(pskGetWorkspaceLayout(split.get(), &li, &count, nullptr), PSK_SUCCESS);
    EXPECT_EQ(count, split->lastWorkspaceBufferCount());
    std::vector<uint64_t> sizes(count);
    ASSERT_EQ(pskGetWorkspaceLayout(split.get(), &li, &count, sizes.data()), PSK_SUCCESS);
    for (uint64_t b : sizes) EXPECT_LE(b, kCap);

    // A second call reuses the buffers and still agrees.
    f = hostInfo(s, in, got);
    ASSERT_EQ(pskAttentionForwardHost(split.get(), &f), PSK_SUCCESS) << lastError(log);
    EXPECT_TRUE(got == expected);
    expectNoValidation(log);
}

Spec spec(const char* name) {
    Spec s;
    s.name = name;
    return s;
}

std::vector<Spec> specs() {
    std::vector<Spec> v;
    Spec s = spec("causal_local_exact_gqa");
    s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    v.push_back(s);
    s = spec("full");
    s.flags = 0;
    v.push_back(s);
    s = spec("learned");
    s.learned = true;
    v.push_back(s);
    s = spec("degree8_nodes");
    s.degree = 8;
    v.push_back(s);
    s = spec("f16_local_exact_batch2");
    s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    s.type = PSK_DATA_TYPE_FLOAT16;
    s.B = 2;
    s.n = 300;
    v.push_back(s);
    return v;
}

INSTANTIATE_TEST_SUITE_P(Polysketch, WorkspaceSplit, ::testing::ValuesIn(specs()),
                         [](const ::testing::TestParamInfo<Spec>& i) { return std::string(i.param.name); });

// The baseline's workspace is one region (the key-chunk state): it fits the cap as one buffer or
// fails with TOO_LARGE. The emulated cooperative kernel on a CPU driver has short key chunks, so a
// few hundred tokens have a state.
TEST_F(ContextTest, BaselineKeyChunkStateUnderTheCap) {
    setenv("PSK_COOPMAT_EMULATION", "1", 1);
    Spec s = spec("softmax");
    s.kind = PSK_ATTENTION_KIND_SOFTMAX;
    s.type = PSK_DATA_TYPE_FLOAT16;
    s.h = s.dv = 64;
    s.Hq = s.Hkv = 1;
    s.n = 1100;  // a state of 1100 x 66 floats (290 KB)
    MessageLog log;
    const Inputs in = makeInputs(s, 70);
    const Attention whole = makeAttention(ctx, s, "");
    ASSERT_TRUE(whole);
    const auto [largest, total] = regionSpan(whole.get(), s);
    if (!largest) {
        // A GPU driver keeps 8192 keys per dispatch: no state at this length (the CPU driver's bound is the point).
        unsetenv("PSK_COOPMAT_EMULATION");
        GTEST_SKIP() << "no key chunks at n = " << s.n << " on this device";
    }
    std::vector<uint8_t> expected, got;
    PskForwardHostInfo f = hostInfo(s, in, expected);
    ASSERT_EQ(pskAttentionForwardHost(whole.get(), &f), PSK_SUCCESS) << lastError(psk::test::sharedLog());
    {
        // The call against the float64 reference too: its key chunks hand their state on through
        // the workspace, which the tests fill with NaN first (PSK_POISON_WORKSPACE), so a chunk
        // reading what the one before did not write fails here, not only on a GPU.
        auto halves = [](const std::vector<uint8_t>& bytes) {
            std::vector<float> x(bytes.size() / 2);
            for (size_t i = 0; i < x.size(); ++i) {
                uint16_t u;
                std::memcpy(&u, &bytes[2 * i], 2);
                x[i] = psk::halfToFloat(u);
            }
            return x;
        };
        auto wide = [](const std::vector<float>& x) { return std::vector<double>(x.begin(), x.end()); };
        std::vector<double> want;
        const psk::ref::Shape shape{int(s.B), int(s.Hq), int(s.Hkv), int(s.n), int(s.h), int(s.dv)};
        psk::ref::softmaxAttention(shape, wide(halves(in.q)), wide(halves(in.k)), wide(halves(in.v)), 1.0 / std::sqrt(double(s.h)),
                                   true, want);
        EXPECT_LE(psk::test::relativeMaxError(halves(expected), want),
                  psk::conformance::threshold(PSK_DATA_TYPE_FLOAT16, psk::conformance::Family::Quadratic));
    }
    {
        const Context capped = cappedContext(kCap, log);
        const Attention a = makeAttention(capped.get(), s, "");
        ASSERT_LE(total, kCap);
        f = hostInfo(s, in, got);
        ASSERT_EQ(pskAttentionForwardHost(a.get(), &f), PSK_SUCCESS) << lastError(log);
        EXPECT_TRUE(got == expected);
        EXPECT_EQ(a->lastWorkspaceBufferCount(), 1u);
    }
    {
        const uint64_t small = 64 << 10;  // below the state; the split is decided before any tensor is allocated
        const Context capped = cappedContext(small, log);
        const Attention a = makeAttention(capped.get(), s, "");
        ASSERT_GT(largest, small);
        log.clear();
        f = hostInfo(s, in, got);
        EXPECT_EQ(pskAttentionForwardHost(a.get(), &f), PSK_ERROR_TOO_LARGE);
        EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](uint8_t x) { return x == 0xAB; })) << "out was written";
        ASSERT_FALSE(log.errors.empty());
        EXPECT_NE(log.errors.back().find("key-chunk state"), std::string::npos) << log.errors.back();
    }
    unsetenv("PSK_COOPMAT_EMULATION");
    expectNoValidation(log);
}

// A packed batch (cuSeqlens) binds the largest sequence's regions once; its sequences share them.
TEST_F(ContextTest, VarlenUnderTheCap) {
    Spec s = spec("varlen");
    s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    MessageLog log;
    const Context capped = cappedContext(kCap, log);
    const Attention whole = makeAttention(ctx, s, ""), split = makeAttention(capped.get(), s, "");
    ASSERT_TRUE(whole && split);
    const Inputs in = makeInputs(s, 170);
    const uint32_t cu[3] = {0, 200, s.n};  // 200 tokens x 32 floats: aligned starts
    std::vector<uint8_t> expected, got;
    PskForwardHostInfo f = hostInfo(s, in, expected);
    f.batchSize = 2;
    f.cuSeqlens = cu;
    ASSERT_EQ(pskAttentionForwardHost(whole.get(), &f), PSK_SUCCESS) << lastError(psk::test::sharedLog());
    f.out = got.data();
    got.assign(in.outBytes, 0xAB);
    f.out = got.data();
    ASSERT_EQ(pskAttentionForwardHost(split.get(), &f), PSK_SUCCESS) << lastError(log);
    EXPECT_GT(split->lastWorkspaceBufferCount(), 1u);
    EXPECT_TRUE(got == expected);
    expectNoValidation(log);
}

// Out of device memory part way through the buffers: the code, nothing written, nothing kept.
TEST_F(ContextTest, OutOfDeviceMemoryWhileSplittingLeaksNothing) {
    Spec s = spec("oom");
    s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    MessageLog log;
    // The attention, the tensors and a first workspace buffer fit the limit, not the second buffer.
    const Context capped = cappedContext(kCap, log, 1536 << 10);
    ASSERT_TRUE(capped);
    const Attention a = makeAttention(capped.get(), s, "");
    ASSERT_TRUE(a);
    const Inputs in = makeInputs(s, 190);
    std::vector<uint8_t> out;
    PskForwardHostInfo f = hostInfo(s, in, out);
    const uint64_t before = capped->allocator().bytesInUse();
    log.clear();
    EXPECT_EQ(pskAttentionForwardHost(a.get(), &f), PSK_ERROR_OUT_OF_DEVICE_MEMORY);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t x) { return x == 0xAB; })) << "out was written";
    EXPECT_EQ(capped->allocator().bytesInUse(), before) << "the failed call kept device memory";
    EXPECT_EQ(log.errors.size(), 1u);
    expectNoValidation(log);
}

// A region larger than the cap alone: TOO_LARGE naming it and the cap, nothing written, nothing leaked.
TEST_F(ContextTest, RegionLargerThanTheCapIsTooLarge) {
    Spec s = spec("states");
    s.Hq = s.Hkv = 1;
    s.n = 256;
    s.r = 32;  // F = 528: the states (4 blocks x 528 rows x 36 floats) are the largest region
    MessageLog log;
    const uint64_t cap = 128 << 10;
    const Context capped = cappedContext(cap, log);
    const Attention a = makeAttention(capped.get(), s, "");
    ASSERT_TRUE(a);
    const auto [largest, total] = regionSpan(a.get(), s);
    ASSERT_GT(largest, cap);
    (void)total;
    const Inputs in = makeInputs(s, 90);
    std::vector<uint8_t> out;
    PskForwardHostInfo f = hostInfo(s, in, out);
    const uint64_t before = capped->allocator().bytesInUse();
    log.clear();
    EXPECT_EQ(pskAttentionForwardHost(a.get(), &f), PSK_ERROR_TOO_LARGE);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint8_t x) { return x == 0xAB; })) << "out was written";
    ASSERT_EQ(log.errors.size(), 1u);
    EXPECT_NE(log.errors[0].find("\"states\""), std::string::npos) << log.errors[0];
    EXPECT_NE(log.errors[0].find(std::to_string(cap)), std::string::npos) << log.errors[0];
    EXPECT_LE(capped->allocator().bytesInUse(), before) << "a failed call kept device memory";

    // The query says the same, for the context's cap and for an app's smaller one.
    PskWorkspaceLayoutInfo li{};
    li.seqLen = s.n;
    uint32_t count = 7;
    EXPECT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_ERROR_TOO_LARGE);
    EXPECT_EQ(count, 7u);
    li.maxBufferSize = (largest + 255) / 256 * 256;  // the largest region padded to 256: every region fits
    ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_SUCCESS);
    EXPECT_GT(count, 1u);
    li.maxBufferSize -= 1;
    EXPECT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_ERROR_TOO_LARGE);
    expectNoValidation(log);
}

TEST_F(ContextTest, WorkspaceLayoutQuery) {
    Spec s = spec("query");
    s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    const Attention a = makeAttention(ctx, s, "");
    ASSERT_TRUE(a);
    uint64_t bytes = 0, stateBytes = 0;
    ASSERT_EQ(pskGetWorkspaceSize(a.get(), s.B, s.n, &bytes), PSK_SUCCESS);
    ASSERT_EQ(pskGetStateWorkspaceSize(a.get(), s.B, s.n, &stateBytes), PSK_SUCCESS);
    PskWorkspaceLayoutInfo li{};
    li.batchSize = s.B;
    li.seqLen = s.n;
    uint32_t count = 0;
    uint64_t one = 0;
    // The device's cap: one buffer of pskGetWorkspaceSize's bytes.
    ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_SUCCESS);
    EXPECT_EQ(count, 1u);
    ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, &one), PSK_SUCCESS);
    EXPECT_EQ(one, bytes);
    li.withDecodeState = 1;
    ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, &one), PSK_SUCCESS);
    EXPECT_EQ(one, stateBytes);
    // An app's cap: several buffers, none above it, together about the whole.
    li.maxBufferSize = kCap;
    ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_SUCCESS);
    ASSERT_GT(count, 1u);
    std::vector<uint64_t> sizes(count, 0);
    uint32_t small = count - 1;
    EXPECT_EQ(pskGetWorkspaceLayout(a.get(), &li, &small, sizes.data()), PSK_ERROR_BUFFER_TOO_SMALL);
    EXPECT_EQ(small, count);
    EXPECT_TRUE(std::all_of(sizes.begin(), sizes.end(), [](uint64_t x) { return x == 0; })) << "written on error";
    ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, sizes.data()), PSK_SUCCESS);
    uint64_t sum = 0;
    for (uint64_t b : sizes) {
        EXPECT_LE(b, kCap);
        sum += b;
    }
    EXPECT_EQ(sum, stateBytes) << "each region is padded to 256 bytes in one buffer or in several";
    EXPECT_EQ(pskGetWorkspaceLayout(nullptr, &li, &count, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(pskGetWorkspaceLayout(a.get(), nullptr, &count, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(pskGetWorkspaceLayout(a.get(), &li, nullptr, nullptr), PSK_ERROR_INVALID_ARGUMENT);
    li.seqLen = 0;
    EXPECT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_ERROR_INVALID_SHAPE);
    psk::test::sharedLog().clear();  // the misuse above reported its errors, as it should
}

// Decoding under the cap: a prefill (the forward plus the state taken from its workspace) and a
// forward continuing the state from inside a block (staged, local exact) equal the uncapped ones.
TEST_F(ContextTest, DecodeStateForwardsUnderTheCap) {
    Spec s = spec("decode");
    s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
    s.n = 512;
    MessageLog log;
    const Context capped = cappedContext(kCap, log);
    const Attention whole = makeAttention(ctx, s, ""), split = makeAttention(capped.get(), s, "");
    ASSERT_TRUE(whole && split);
    const Inputs in = makeInputs(s, 120);
    const size_t qRow = s.h * 4, vRow = s.dv * 4;
    // Tokens [t0, t0 + n) of the BHND inputs.
    auto part = [&](const std::vector<uint8_t>& x, uint32_t heads, size_t row, uint32_t t0, uint32_t n) {
        std::vector<uint8_t> p;
        for (uint32_t hd = 0; hd < heads; ++hd)
            p.insert(p.end(), x.begin() + (size_t(hd) * s.n + t0) * row, x.begin() + (size_t(hd) * s.n + t0 + n) * row);
        return p;
    };
    auto run = [&](PskAttention a, std::vector<uint8_t>& rows, std::vector<uint8_t>& blob) {
        PskDecodeStateCreateInfo ci{};
        PskDecodeState st = nullptr;
        EXPECT_EQ(pskCreateDecodeState(a, &ci, &st), PSK_SUCCESS);
        State state(st);
        const uint32_t first = 100;  // not a multiple of b: the next forward is staged
        const std::vector<uint8_t> q0 = part(in.q, s.Hq, qRow, 0, first), k0 = part(in.k, s.Hkv, qRow, 0, first),
                                   v0 = part(in.v, s.Hkv, vRow, 0, first);
        std::vector<uint8_t> out0(size_t(s.Hq) * first * vRow);
        PskDecodePrefillInfo p{};
        p.seqLen = first;
        p.q = q0.data();
        p.k = k0.data();
        p.v = v0.data();
        p.out = out0.data();
        p.qBytes = q0.size();
        p.kBytes = k0.size();
        p.vBytes = v0.size();
        p.outBytes = out0.size();
        EXPECT_EQ(pskDecodePrefillHost(state.get(), &p), PSK_SUCCESS) << lastError(log) << lastError(psk::test::sharedLog());
        const uint32_t rest = s.n - first;
        const std::vector<uint8_t> q1 = part(in.q, s.Hq, qRow, first, rest), k1 = part(in.k, s.Hkv, qRow, first, rest),
                                   v1 = part(in.v, s.Hkv, vRow, first, rest);
        std::vector<uint8_t> out1(size_t(s.Hq) * rest * vRow);
        PskForwardHostInfo f{};
        f.seqLen = rest;
        f.q = q1.data();
        f.k = k1.data();
        f.v = v1.data();
        f.out = out1.data();
        f.qBytes = q1.size();
        f.kBytes = k1.size();
        f.vBytes = v1.size();
        f.outBytes = out1.size();
        f.state = state.get();
        EXPECT_EQ(pskAttentionForwardHost(a, &f), PSK_SUCCESS) << lastError(log) << lastError(psk::test::sharedLog());
        rows = out0;
        rows.insert(rows.end(), out1.begin(), out1.end());
        size_t size = 0;
        EXPECT_EQ(pskSerializeDecodeState(state.get(), nullptr, &size), PSK_SUCCESS);
        blob.resize(size);
        EXPECT_EQ(pskSerializeDecodeState(state.get(), blob.data(), &size), PSK_SUCCESS);
    };
    std::vector<uint8_t> rowsWhole, blobWhole, rowsSplit, blobSplit;
    run(whole.get(), rowsWhole, blobWhole);
    EXPECT_EQ(whole->lastWorkspaceBufferCount(), 1u);
    run(split.get(), rowsSplit, blobSplit);
    EXPECT_GT(split->lastWorkspaceBufferCount(), 1u) << "the state forward's workspace was not split";
    EXPECT_TRUE(rowsSplit == rowsWhole) << "the split workspace changed the rows";
    EXPECT_TRUE(blobSplit == blobWhole) << "the split workspace changed the state";
    expectNoValidation(log);
}

// ---- The recorded form with several app buffers ----

struct Recorded {
    std::unique_ptr<psk::test::AppVulkan::HostBuffer> tensors;
    VkDeviceSize off[4] = {}, bytes[4] = {};
    PskCmdForwardInfo info{};
};

Recorded recorded(psk::test::AppVulkan& app, const Spec& s, const Inputs& in) {
    const VkDeviceSize align = std::max<VkDeviceSize>(app.limits.minStorageBufferOffsetAlignment, 4);
    auto up = [&](VkDeviceSize v) { return (v + align - 1) / align * align; };
    Recorded r;
    const std::vector<uint8_t>* src[3] = {&in.q, &in.k, &in.v};
    VkDeviceSize at = 0;
    for (int i = 0; i < 4; ++i) {
        r.bytes[i] = i < 3 ? src[i]->size() : in.outBytes;
        r.off[i] = at;
        at = up(at + r.bytes[i]);
    }
    r.tensors = app.buffer(at);
    for (int i = 0; i < 3; ++i) std::memcpy(r.tensors->data + r.off[i], src[i]->data(), r.bytes[i]);
    std::memset(r.tensors->data + r.off[3], 0xAB, r.bytes[3]);
    r.info.batchSize = s.B;
    r.info.seqLen = s.n;
    PskVulkanTensor* t[4] = {&r.info.q, &r.info.k, &r.info.v, &r.info.out};
    for (int i = 0; i < 4; ++i) *t[i] = {r.tensors->buffer, r.off[i], r.bytes[i], nullptr};
    return r;
}

std::vector<uint8_t> recordedOut(const Recorded& r) {
    return std::vector<uint8_t>(r.tensors->data + r.off[3], r.tensors->data + r.off[3] + r.bytes[3]);
}

TEST(WorkspaceSplitEmbed, SeveralAppBuffersEqualTheHostForm) {
    psk::test::AppVulkan app(PSK_DEVICE_CAPABILITY_ALL);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    MessageLog log;
    PskContext ctx = app.context(log);
    ASSERT_NE(ctx, nullptr);
    {
        Spec s = spec("embed");
        s.flags = PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT;
        s.degree = 8;  // node scratch too: every polysketch region
        const Attention a = makeAttention(ctx, s, "");
        ASSERT_TRUE(a);
        const Inputs in = makeInputs(s, 150);
        std::vector<uint8_t> expected;
        PskForwardHostInfo f = hostInfo(s, in, expected);
        ASSERT_EQ(pskAttentionForwardHost(a.get(), &f), PSK_SUCCESS) << lastError(log);

        PskWorkspaceLayoutInfo li{};
        li.batchSize = s.B;
        li.seqLen = s.n;
        li.maxBufferSize = kCap;
        uint32_t count = 0;
        ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, nullptr), PSK_SUCCESS);
        ASSERT_GT(count, 1u);
        std::vector<uint64_t> sizes(count);
        ASSERT_EQ(pskGetWorkspaceLayout(a.get(), &li, &count, sizes.data()), PSK_SUCCESS);
        // Each in a buffer of its own, the second at a non-zero offset.
        const VkDeviceSize align = std::max<VkDeviceSize>(app.limits.minStorageBufferOffsetAlignment, 4);
        std::vector<std::unique_ptr<psk::test::AppVulkan::HostBuffer>> buffers;
        std::vector<PskWorkspaceRange> ranges;
        for (uint32_t i = 0; i < count; ++i) {
            const VkDeviceSize offset = i == 1 ? align : 0;
            buffers.push_back(app.buffer(offset + sizes[i]));
            ranges.push_back({buffers.back()->buffer, offset, sizes[i]});
        }
        Recorded r = recorded(app, s, in);
        r.info.workspaceCount = count;
        r.info.pWorkspaces = ranges.data();

        // Bad lists first: each its code, nothing recorded (out keeps its fill after the submission).
        struct Bad {
            const char* what;
            PskResult code;
            std::function<void(PskCmdForwardInfo&, std::vector<PskWorkspaceRange>&)> edit;
        };
        const std::vector<Bad> bad = {
            {"pWorkspaces NULL", PSK_ERROR_INVALID_ARGUMENT, [](PskCmdForwardInfo& i, auto&) { i.pWorkspaces = nullptr; }},
            {"workspace too", PSK_ERROR_INVALID_ARGUMENT, [&](PskCmdForwardInfo& i, auto&) { i.workspace = ranges[0].buffer; }},
            {"null buffer", PSK_ERROR_INVALID_ARGUMENT, [](PskCmdForwardInfo&, auto& v) { v[1].buffer = VK_NULL_HANDLE; }},
            {"misaligned", PSK_ERROR_INVALID_ARGUMENT, [](PskCmdForwardInfo&, auto& v) { v[1].offset += 1; }},
            {"too small", PSK_ERROR_BUFFER_TOO_SMALL, [](PskCmdForwardInfo&, auto& v) { v[0].size = 256; }},
            {"too few", PSK_ERROR_BUFFER_TOO_SMALL, [](PskCmdForwardInfo& i, auto&) { --i.workspaceCount; }},
        };
        app.run([&](VkCommandBuffer cmd) {
            for (const Bad& b : bad) {
                SCOPED_TRACE(b.what);
                PskCmdForwardInfo info = r.info;
                std::vector<PskWorkspaceRange> v = ranges;
                info.pWorkspaces = v.data();
                b.edit(info, v);
                log.clear();
                EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &info), b.code);
                ASSERT_EQ(log.errors.size(), 1u);
                if (std::string(b.what) == "null buffer" || std::string(b.what) == "misaligned")
                    EXPECT_NE(log.errors[0].find("pWorkspaces[1]"), std::string::npos) << log.errors[0];
                if (std::string(b.what) == "too small")
                    EXPECT_NE(log.errors[0].find("pWorkspaces[0]"), std::string::npos) << log.errors[0];
            }
        });
        EXPECT_TRUE(recordedOut(r) == std::vector<uint8_t>(in.outBytes, 0xAB)) << "a failed call recorded something";

        app.run([&](VkCommandBuffer cmd) {
            psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                  VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
            EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &r.info), PSK_SUCCESS) << lastError(log);
            psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                  VK_ACCESS_HOST_READ_BIT);
        });
        EXPECT_TRUE(recordedOut(r) == expected) << "several app buffers differ from the host form";

        // The single buffer of before still works (workspaceCount 0).
        uint64_t bytes = 0;
        ASSERT_EQ(pskGetWorkspaceSize(a.get(), s.B, s.n, &bytes), PSK_SUCCESS);
        auto one = app.buffer(bytes);
        Recorded r1 = recorded(app, s, in);
        r1.info.workspace = one->buffer;
        r1.info.workspaceSize = bytes;
        app.run([&](VkCommandBuffer cmd) {
            psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                  VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
            EXPECT_EQ(pskCmdAttentionForward(a.get(), cmd, &r1.info), PSK_SUCCESS) << lastError(log);
            psk::test::appBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                                  VK_ACCESS_HOST_READ_BIT);
        });
        EXPECT_TRUE(recordedOut(r1) == expected);
        EXPECT_EQ(pskResetCommandDescriptors(a.get()), PSK_SUCCESS);
    }
    pskDestroyContext(ctx);
    for (const std::string& m : log.validation) ADD_FAILURE() << "validation message: " << m;
}

}  // namespace
