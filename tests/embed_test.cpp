// Embedding in an app (docs/EMBEDDING.md): a context adopting the app's VkInstance/VkDevice/queue (created
// here with the loader, as an app would), pskCmdAttentionForward into the app's command buffer on
// the app's buffers at non-zero offsets against pskAttentionForwardHost (softmax, polynomial,
// polysketch causal + local exact, polysketch full; with and without push descriptors), its misuse
// codes, the capability queries, out of device memory without leaks, and two contexts on one device.
#include <polysketch/polysketch_vulkan.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <cmath>

#include "forward/attention.hpp"  // internals: the allocator's bytesInUse
#include "util/error.hpp"
#include "vk/context.hpp"
#include "support/app_vulkan.hpp"
#include "support/host_arrays.hpp"
#include "support/test_context.hpp"

namespace {

using psk::test::AppVulkan;
using psk::test::appBarrier;
using psk::test::MessageLog;
using psk::test::setHostArrays;

bool requireValidation() {
    const char* r = std::getenv("PSK_REQUIRE_VALIDATION");
    return r && std::string(r) == "1";
}

struct Case {
    const char* name;
    PskAttentionKind kind;
    uint32_t flags;
    uint32_t degree;
};

const Case kCases[] = {
    {"softmax_causal", PSK_ATTENTION_KIND_SOFTMAX, PSK_ATTENTION_CAUSAL_BIT, 0},
    {"polynomial_full", PSK_ATTENTION_KIND_POLYNOMIAL, 0, 4},
    {"polysketch_causal_local_exact", PSK_ATTENTION_KIND_POLYSKETCH, PSK_ATTENTION_CAUSAL_BIT | PSK_ATTENTION_LOCAL_EXACT_BIT, 4},
    {"polysketch_full", PSK_ATTENTION_KIND_POLYSKETCH, 0, 2},
};

PskAttentionCreateInfo attentionInfo(const Case& c) {
    PskAttentionCreateInfo a{};
    a.kind = c.kind;
    a.flags = c.flags;
    a.degree = c.degree;
    a.numQueryHeads = 2;
    a.numKeyValueHeads = 1;
    a.headDim = 16;
    a.valueDim = 8;
    a.sketchSize = 8;
    a.blockSize = 16;
    a.seed = 7;
    return a;
}

/** Runs every case through the cmd path at odd (aligned) offsets and compares with the host path. */
void cmdMatchesHost(PskDeviceCapabilityFlags wanted) {
    AppVulkan app(wanted);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    MessageLog log;
    PskContext ctx = app.context(log);
    ASSERT_NE(ctx, nullptr);
    const uint32_t B = 2, n = 70, h = 16, dv = 8, Hq = 2, Hkv = 1;
    const VkDeviceSize align = std::max<VkDeviceSize>(app.limits.minStorageBufferOffsetAlignment, 4);
    for (const Case& c : kCases) {
        SCOPED_TRACE(c.name);
        PskAttentionCreateInfo ai = attentionInfo(c);
        EXPECT_EQ(pskIsAttentionSupported(ctx, &ai), PSK_SUCCESS);
        PskAttention att = nullptr;
        ASSERT_EQ(pskCreateAttention(ctx, &ai, &att), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());
        const std::vector<float> q = psk::test::randomNormal(size_t(B) * Hq * n * h, 1, 0.5f);
        const std::vector<float> k = psk::test::randomNormal(size_t(B) * Hkv * n * h, 2, 0.5f);
        const std::vector<float> v = psk::test::randomNormal(size_t(B) * Hkv * n * dv, 3);
        std::vector<float> hostOut(size_t(B) * Hq * n * dv, -1.0f);
        PskForwardHostInfo hi{};
        hi.batchSize = B;
        hi.seqLen = n;
        setHostArrays(hi, q, k, v, &hostOut);
        ASSERT_EQ(pskAttentionForwardHost(att, &hi), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());

        // One buffer for all four tensors and the workspace, each at a non-zero aligned offset.
        uint64_t workspace = 0;
        ASSERT_EQ(pskGetWorkspaceSize(att, B, n, &workspace), PSK_SUCCESS);
        auto up = [&](VkDeviceSize x) { return (x + align - 1) / align * align; };
        const VkDeviceSize qOff = align, kOff = up(qOff + hi.qBytes) + align, vOff = up(kOff + hi.kBytes) + 2 * align,
                           oOff = up(vOff + hi.vBytes) + align, wOff = up(oOff + hi.outBytes) + align;
        auto buf = app.buffer(wOff + std::max<uint64_t>(workspace, 4));
        std::memcpy(buf->data + qOff, q.data(), hi.qBytes);
        std::memcpy(buf->data + kOff, k.data(), hi.kBytes);
        std::memcpy(buf->data + vOff, v.data(), hi.vBytes);
        PskCmdForwardInfo ci{};
        ci.batchSize = B;
        ci.seqLen = n;
        ci.q = {buf->buffer, qOff, hi.qBytes, nullptr};
        ci.k = {buf->buffer, kOff, hi.kBytes, nullptr};
        ci.v = {buf->buffer, vOff, hi.vBytes, nullptr};
        ci.out = {buf->buffer, oOff, hi.outBytes, nullptr};
        ci.workspace = workspace ? buf->buffer : VK_NULL_HANDLE;
        ci.workspaceOffset = wOff;
        ci.workspaceSize = workspace;
        for (int repeat = 0; repeat < 2; ++repeat) {
            std::memset(buf->data + oOff, 0xFF, hi.outBytes);
            app.run([&](VkCommandBuffer cmd) {
                appBarrier(cmd, VK_PIPELINE_STAGE_HOST_BIT, VK_ACCESS_HOST_WRITE_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                           VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT);
                EXPECT_EQ(pskCmdAttentionForward(att, cmd, &ci), PSK_SUCCESS) << (log.errors.empty() ? "" : log.errors.back());
                appBarrier(cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                           VK_ACCESS_HOST_READ_BIT);
            });
            std::vector<float> cmdOut(hostOut.size());
            std::memcpy(cmdOut.data(), buf->data + oOff, hi.outBytes);
            EXPECT_EQ(0, std::memcmp(cmdOut.data(), hostOut.data(), hi.outBytes)) << "cmd path differs from host path";
            EXPECT_EQ(pskResetCommandDescriptors(att), PSK_SUCCESS);
        }
        pskDestroyAttention(att);
    }
    EXPECT_TRUE(log.errors.empty());
    EXPECT_TRUE(log.validation.empty());
    pskDestroyContext(ctx);
}

TEST(Embed, CmdForwardMatchesHostWithPushDescriptors) { cmdMatchesHost(PSK_DEVICE_CAPABILITY_ALL); }

TEST(Embed, CmdForwardMatchesHostWithDescriptorPools) {
    cmdMatchesHost(PSK_DEVICE_CAPABILITY_ALL & ~PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT);
}

/** The one ERROR message of a failed call, with its code and a keyword; clears the log. */
void expectOneError(MessageLog& log, PskResult code, const char* keyword) {
    std::lock_guard<std::mutex> lock(log.mutex);
    ASSERT_EQ(log.errors.size(), 1u);
    EXPECT_EQ(log.errorCodes[0], code);
    EXPECT_NE(log.errors[0].find(keyword), std::string::npos) << log.errors[0];
    log.errors.clear();
    log.errorCodes.clear();
}

TEST(Embed, CmdForwardMisuse) {
    AppVulkan app(PSK_DEVICE_CAPABILITY_ALL);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    MessageLog log;
    PskContext ctx = app.context(log);
    ASSERT_NE(ctx, nullptr);
    PskAttentionCreateInfo ai = attentionInfo(kCases[2]);
    PskAttention att = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &ai, &att), PSK_SUCCESS);
    const uint32_t B = 1, n = 40;
    const VkDeviceSize qBytes = B * 2 * n * 16 * 4, kBytes = B * 1 * n * 16 * 4, vBytes = B * 1 * n * 8 * 4, oBytes = B * 2 * n * 8 * 4;
    uint64_t ws = 0;
    ASSERT_EQ(pskGetWorkspaceSize(att, B, n, &ws), PSK_SUCCESS);
    ASSERT_GT(ws, 0u);
    const VkDeviceSize align = std::max<VkDeviceSize>(app.limits.minStorageBufferOffsetAlignment, 1);
    auto q = app.buffer(qBytes), k = app.buffer(kBytes), v = app.buffer(vBytes), o = app.buffer(oBytes), w = app.buffer(ws + 256);
    PskCmdForwardInfo good{};
    good.batchSize = B;
    good.seqLen = n;
    good.q = {q->buffer, 0, qBytes, nullptr};
    good.k = {k->buffer, 0, kBytes, nullptr};
    good.v = {v->buffer, 0, vBytes, nullptr};
    good.out = {o->buffer, 0, oBytes, nullptr};
    good.workspace = w->buffer;
    good.workspaceSize = ws;

    app.run([&](VkCommandBuffer cmd) {
        EXPECT_EQ(pskCmdAttentionForward(att, VK_NULL_HANDLE, &good), PSK_ERROR_INVALID_ARGUMENT);
        expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "commandBuffer");
        EXPECT_EQ(pskCmdAttentionForward(nullptr, cmd, &good), PSK_ERROR_INVALID_ARGUMENT);
        EXPECT_TRUE(log.errors.empty());  // no attention, no context to report through
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, nullptr), PSK_ERROR_INVALID_ARGUMENT);
        expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "info");

        PskCmdForwardInfo bad = good;
        bad.k.buffer = VK_NULL_HANDLE;
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
        expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "k.buffer");

        if (align > 1) {
            bad = good;
            bad.v.offset = align / 2;
            bad.v.size = vBytes;
            EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
            expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "minStorageBufferOffsetAlignment");
            bad = good;
            bad.workspaceOffset = align / 2;
            EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
            expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "workspaceOffset");
        }
        bad = good;
        bad.out.size = oBytes - 4;
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL);
        expectOneError(log, PSK_ERROR_BUFFER_TOO_SMALL, "out.size");
        bad = good;
        bad.q.size = 0;
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL);
        expectOneError(log, PSK_ERROR_BUFFER_TOO_SMALL, "q.size");
        bad = good;
        bad.workspaceSize = ws - 4;
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_BUFFER_TOO_SMALL);
        expectOneError(log, PSK_ERROR_BUFFER_TOO_SMALL, "workspaceSize");
        bad = good;
        bad.workspace = VK_NULL_HANDLE;
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_INVALID_ARGUMENT);
        expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "workspace");
        bad = good;
        bad.seqLen = 0;
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &bad), PSK_ERROR_INVALID_SHAPE);
        expectOneError(log, PSK_ERROR_INVALID_SHAPE, "seqLen");
        // Positive control in the same command buffer.
        EXPECT_EQ(pskCmdAttentionForward(att, cmd, &good), PSK_SUCCESS);
    });
    EXPECT_EQ(pskResetCommandDescriptors(nullptr), PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_TRUE(log.validation.empty());
    pskDestroyAttention(att);
    pskDestroyContext(ctx);
}

TEST(Embed, ExternalContextRules) {
    AppVulkan app(PSK_DEVICE_CAPABILITY_ALL);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    MessageLog log;
    // Requirements: no bogus bits; what is supported is a subset of what was asked.
    PskVulkanDeviceRequirements req{};
    EXPECT_EQ(pskGetVulkanDeviceRequirements(vkGetInstanceProcAddr, app.instance, VK_API_VERSION_1_2, app.physicalDevice,
                                             PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT, &req),
              PSK_SUCCESS);
    EXPECT_EQ(req.supportedCapabilities & ~uint32_t(PSK_DEVICE_CAPABILITY_PUSH_DESCRIPTORS_BIT), 0u);
    EXPECT_EQ(pskGetVulkanDeviceRequirements(vkGetInstanceProcAddr, app.instance, VK_API_VERSION_1_2, app.physicalDevice,
                                             0x100, &req),
              PSK_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(pskGetVulkanDeviceRequirements(nullptr, app.instance, VK_API_VERSION_1_2, app.physicalDevice, 0, &req),
              PSK_ERROR_INVALID_ARGUMENT);

    PskExternalVulkan e = app.external();
    PskContextCreateInfo info{};
    info.externalVulkan = &e;
    info.messageCallback = &MessageLog::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    info.device = "0";
    EXPECT_EQ(pskCreateContext(&info, &ctx), PSK_ERROR_INVALID_ARGUMENT);
    expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "device");
    info.device = nullptr;
    info.flags = PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    EXPECT_EQ(pskCreateContext(&info, &ctx), PSK_ERROR_INVALID_ARGUMENT);
    expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "validation");
    info.flags = 0;
    e.queue = VK_NULL_HANDLE;
    EXPECT_EQ(pskCreateContext(&info, &ctx), PSK_ERROR_INVALID_ARGUMENT);
    expectOneError(log, PSK_ERROR_INVALID_ARGUMENT, "queue");
    e = app.external();
    // A capability the device does not support (and so the app cannot have enabled).
    const uint32_t unsupported = PSK_DEVICE_CAPABILITY_ALL & ~app.enabled;
    if (unsupported) {
        e.enabledCapabilities = PSK_DEVICE_CAPABILITY_ALL;
        EXPECT_EQ(pskCreateContext(&info, &ctx), PSK_ERROR_UNSUPPORTED);
        expectOneError(log, PSK_ERROR_UNSUPPORTED, "enabledCapabilities");
        e = app.external();
    }
    EXPECT_EQ(ctx, nullptr);

    // Without 16-bit storage enabled, float16 attention is unsupported; with it, supported.
    e.enabledCapabilities = app.enabled & ~uint32_t(PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT);
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    PskAttentionCreateInfo half = attentionInfo(kCases[1]);
    half.dataType = PSK_DATA_TYPE_FLOAT16;
    const VkDeviceSize before = ctx->allocator().bytesInUse();
    EXPECT_EQ(pskIsAttentionSupported(ctx, &half), PSK_ERROR_UNSUPPORTED);
    expectOneError(log, PSK_ERROR_UNSUPPORTED, "16");
    PskAttention att = nullptr;
    EXPECT_EQ(pskCreateAttention(ctx, &half, &att), PSK_ERROR_UNSUPPORTED);
    expectOneError(log, PSK_ERROR_UNSUPPORTED, "16");
    PskAttentionCreateInfo badDim = attentionInfo(kCases[0]);
    badDim.headDim = 3;
    const PskResult code = pskIsAttentionSupported(ctx, &badDim);
    EXPECT_NE(code, PSK_SUCCESS);
    EXPECT_EQ(pskCreateAttention(ctx, &badDim, &att), code);
    log.clear();
    EXPECT_EQ(ctx->allocator().bytesInUse(), before) << "the query allocated";
    pskDestroyContext(ctx);
    ctx = nullptr;
    if (app.enabled & PSK_DEVICE_CAPABILITY_16BIT_STORAGE_BIT) {
        e.enabledCapabilities = app.enabled;
        ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
        EXPECT_EQ(pskIsAttentionSupported(ctx, &half), PSK_SUCCESS);
        pskDestroyContext(ctx);
    }
    // The app's device is still the app's: it keeps working after the contexts are gone.
    auto b = app.buffer(256);
    app.run([&](VkCommandBuffer cmd) { vkCmdFillBuffer(cmd, b->buffer, 0, 256, 0x3F800000u); });
    EXPECT_EQ(reinterpret_cast<const float*>(b->data)[63], 1.0f);
    EXPECT_TRUE(log.validation.empty());
}

PskContext ownContext(MessageLog& log, uint64_t memoryLimit = 0) {
    PskContextCreateInfo info{};
    info.flags = requireValidation() ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &MessageLog::callback;
    info.messageUserData = &log;
    info.deviceMemoryLimit = memoryLimit;
    PskContext ctx = nullptr;
    EXPECT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    return ctx;
}

/** A host forward of `n` tokens with random inputs into `out`. */
PskResult hostForward(PskAttention att, uint32_t n, std::vector<float>& out) {
    const std::vector<float> q = psk::test::randomNormal(size_t(2) * n * 16, 11, 0.5f);
    const std::vector<float> kv = psk::test::randomNormal(size_t(n) * 16, 12, 0.5f);
    out.assign(size_t(2) * n * 8, 0.0f);
    PskForwardHostInfo hi{};
    hi.seqLen = n;
    setHostArrays(hi, q, kv, kv, &out);
    return pskAttentionForwardHost(att, &hi);
}

TEST(Embed, OutOfDeviceMemoryLeaksNothing) {
    MessageLog log;
    const uint64_t limit = uint64_t(8) << 20;
    PskContext ctx = ownContext(log, limit);
    ASSERT_NE(ctx, nullptr);
    PskAttentionCreateInfo ai = attentionInfo(kCases[0]);
    PskAttention att = nullptr;
    ASSERT_EQ(pskCreateAttention(ctx, &ai, &att), PSK_SUCCESS);
    const VkDeviceSize before = ctx->allocator().bytesInUse();
    // q alone is 2 * 65536 * 16 * 4 = 8 MiB: with k, v and out far beyond the 8 MiB limit.
    std::vector<float> out;
    EXPECT_EQ(hostForward(att, 65536, out), PSK_ERROR_OUT_OF_DEVICE_MEMORY);
    expectOneError(log, PSK_ERROR_OUT_OF_DEVICE_MEMORY, "deviceMemoryLimit");
    EXPECT_EQ(ctx->allocator().bytesInUse(), before) << "a failed forward kept device memory";
    EXPECT_LE(ctx->allocator().bytesAllocated(), limit);
    // The attention still works at a size that fits.
    EXPECT_EQ(hostForward(att, 256, out), PSK_SUCCESS);
    EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return std::isfinite(x); }));

    // A single buffer beyond maxMemoryAllocationSize: TOO_LARGE, told in advance, nothing kept.
    const VkDeviceSize maxAlloc = ctx->caps().maxMemoryAllocationSize;
    if (maxAlloc && maxAlloc < (VkDeviceSize(1) << 62)) {
        PskContext big = ownContext(log);
        const VkDeviceSize bigBefore = big->allocator().bytesInUse();
        try {
            psk::Buffer b(big->allocator(), maxAlloc + 4096, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT, psk::MemoryUsage::DeviceLocal);
            ADD_FAILURE() << "a buffer beyond maxMemoryAllocationSize was allocated";
        } catch (const psk::Error& e) {
            EXPECT_TRUE(e.code() == PSK_ERROR_TOO_LARGE || e.code() == PSK_ERROR_OUT_OF_DEVICE_MEMORY) << e.what();
        }
        EXPECT_EQ(big->allocator().bytesInUse(), bigBefore);
        EXPECT_EQ(big->validationMessageCount(), 0u);
        pskDestroyContext(big);
    }
    pskDestroyAttention(att);
    EXPECT_EQ(ctx->allocator().bytesInUse(), 0u);
    EXPECT_TRUE(log.validation.empty());
    pskDestroyContext(ctx);
}

TEST(Embed, TwoContextsOnOneDeviceCoexist) {
    // Only one device here: two library-owned contexts on it, plus one adopting an app device on
    // the same physical device, used interleaved; each gives the same result.
    MessageLog log;
    PskContext a = ownContext(log), b = ownContext(log);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    AppVulkan app(PSK_DEVICE_CAPABILITY_ALL);
    ASSERT_NE(app.device, VK_NULL_HANDLE);
    PskContext c = app.context(log);
    ASSERT_NE(c, nullptr);
    PskAttentionCreateInfo ai = attentionInfo(kCases[2]);
    PskAttention attA = nullptr, attB = nullptr, attC = nullptr;
    ASSERT_EQ(pskCreateAttention(a, &ai, &attA), PSK_SUCCESS);
    ASSERT_EQ(pskCreateAttention(b, &ai, &attB), PSK_SUCCESS);
    ASSERT_EQ(pskCreateAttention(c, &ai, &attC), PSK_SUCCESS);
    std::vector<float> outA, outB, outC;
    for (int i = 0; i < 2; ++i) {
        ASSERT_EQ(hostForward(attA, 50, outA), PSK_SUCCESS);
        ASSERT_EQ(hostForward(attB, 50, outB), PSK_SUCCESS);
        ASSERT_EQ(hostForward(attC, 50, outC), PSK_SUCCESS);
        EXPECT_EQ(outA, outB);
        EXPECT_EQ(outA, outC);
    }
    pskDestroyAttention(attA);
    pskDestroyContext(a);  // b and c are unaffected
    ASSERT_EQ(hostForward(attB, 50, outB), PSK_SUCCESS);
    EXPECT_EQ(outA, outB);
    pskDestroyAttention(attB);
    pskDestroyAttention(attC);
    pskDestroyContext(b);
    pskDestroyContext(c);
    EXPECT_TRUE(log.errors.empty());
    EXPECT_TRUE(log.validation.empty());
}

}  // namespace
