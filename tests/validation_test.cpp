// Proves the validation plumbing can fail: a deliberately invalid Vulkan call must reach the
// message callback as PSK_MESSAGE_SEVERITY_VALIDATION, and deliberate synchronization hazards (in
// one command buffer, and across submissions) must reach it as SYNC-HAZARD messages. If the layer
// or its synchronization validation were silently absent, every other GPU test's "no validation
// message" check would prove nothing about barriers.
#include <gtest/gtest.h>
#include "kernels/kernel_pipeline.hpp"

#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "forward/polysketch_forward.hpp"
#include "vk/context.hpp"
#include "vk/memory.hpp"
#include "vk/recorder.hpp"

namespace {

// As tests/support/test_context.cpp: synchronization validation across queue submissions too
// (VK_LAYER_ENABLES, unless the developer set it), before main while the process has one thread.
constexpr const char* kQueueSubmitValidationEnable = "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT";
[[maybe_unused]] const bool kQueueSubmitSyncValidation = [] {
#if defined(_WIN32)
    if (!std::getenv("VK_LAYER_ENABLES")) _putenv_s("VK_LAYER_ENABLES", kQueueSubmitValidationEnable);
#else
    setenv("VK_LAYER_ENABLES", kQueueSubmitValidationEnable, 0);
#endif
    return true;
}();

struct Log {
    std::mutex mutex;
    std::vector<std::string> validation;
    std::vector<std::string> info;
    static void callback(PskMessageSeverity severity, PskResult, const char* message, void* user) {
        auto* log = static_cast<Log*>(user);
        std::lock_guard<std::mutex> lock(log->mutex);
        if (severity == PSK_MESSAGE_SEVERITY_VALIDATION) log->validation.emplace_back(message);
        if (severity == PSK_MESSAGE_SEVERITY_INFO) log->info.emplace_back(message);
    }
    size_t count(const std::string& needle) {
        std::lock_guard<std::mutex> lock(mutex);
        size_t n = 0;
        for (const std::string& m : validation) n += m.find(needle) != std::string::npos;
        return n;
    }
    bool layerMissing() {
        std::lock_guard<std::mutex> lock(mutex);
        for (const std::string& m : info)
            if (m.find("layer is not installed") != std::string::npos) return true;
        return false;
    }
};

bool validationRequired() {
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    return require && std::string(require) == "1";
}

/**
 * Records with `record` into a command buffer of its own (not the recorder of ctx->execute, so
 * that several Recorders can share it), submits it and waits. `arena` is null where the device has
 * push descriptors.
 */
void recordAndSubmit(PskContext ctx, const std::function<void(VkCommandBuffer, psk::DescriptorArena*)>& record) {
    const psk::DeviceFunctions& vk = ctx->vk();
    const VkDevice device = ctx->device();
    VkCommandPoolCreateInfo poolInfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    poolInfo.queueFamilyIndex = ctx->queueFamily();
    VkCommandPool pool = VK_NULL_HANDLE;
    ASSERT_EQ(vk.vkCreateCommandPool(device, &poolInfo, nullptr, &pool), VK_SUCCESS);
    VkCommandBufferAllocateInfo cbInfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    cbInfo.commandPool = pool;
    cbInfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    cbInfo.commandBufferCount = 1;
    VkCommandBuffer cmd = VK_NULL_HANDLE;
    VkFence fence = VK_NULL_HANDLE;
    VkFenceCreateInfo fenceInfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (vk.vkAllocateCommandBuffers(device, &cbInfo, &cmd) == VK_SUCCESS &&
        vk.vkCreateFence(device, &fenceInfo, nullptr, &fence) == VK_SUCCESS) {
        std::unique_ptr<psk::DescriptorArena> arena;
        if (!ctx->pipelines().usesPushDescriptors()) arena = std::make_unique<psk::DescriptorArena>(vk, device);
        VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
        begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
        EXPECT_EQ(vk.vkBeginCommandBuffer(cmd, &begin), VK_SUCCESS);
        record(cmd, arena.get());
        EXPECT_EQ(vk.vkEndCommandBuffer(cmd), VK_SUCCESS);
        ctx->submitAndWait(cmd, fence);
    } else {
        ADD_FAILURE() << "could not allocate a command buffer and a fence";
    }
    if (fence) vk.vkDestroyFence(device, fence, nullptr);
    vk.vkDestroyCommandPool(device, pool, nullptr);
}

/**
 * Two self_tensor dispatches (shaders/self_tensor.comp), the second reading what the first wrote:
 * sketches -> features, then features (as sketch rows) -> output.
 */
struct ChainedDispatches {
    static constexpr uint32_t kRows = 8, kSketch = 4, kFeatures = kSketch * (kSketch + 1) / 2;
    static constexpr VkDeviceSize kSketchBytes = kRows * kSketch * 4, kFeatureBytes = kRows * kFeatures * 4;
    psk::Buffer sketches, pairs, features, output;
    explicit ChainedDispatches(PskContext ctx) {
        const VkBufferUsageFlags usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        sketches = psk::Buffer(ctx->allocator(), kSketchBytes, usage, psk::MemoryUsage::DeviceLocal);
        pairs = psk::Buffer(ctx->allocator(), kFeatures * 4, usage, psk::MemoryUsage::DeviceLocal);
        features = psk::Buffer(ctx->allocator(), kFeatureBytes, usage, psk::MemoryUsage::DeviceLocal);
        output = psk::Buffer(ctx->allocator(), kFeatureBytes, usage, psk::MemoryUsage::DeviceLocal);
        // Defined inputs (pair entry 0 is (0, 0) with coefficient 1), in a submission of its own.
        ctx->execute([&](psk::Recorder& r) {
            r.fill({sketches.handle(), 0, kSketchBytes}, kSketchBytes, 0);
            r.fill({pairs.handle(), 0, kFeatures * 4}, kFeatures * 4, 0);
        });
    }
    void recordFirst(PskContext ctx, psk::Recorder& recorder, VkPipeline pipeline) const {
        psk::recordSelfTensor(recorder, pipeline, ctx->caps(), {sketches.handle(), 0, kSketchBytes}, {pairs.handle(), 0, kFeatures * 4},
                              {features.handle(), 0, kFeatureBytes}, kRows, kSketch);
    }
    void recordSecond(PskContext ctx, psk::Recorder& recorder, VkPipeline pipeline) const {
        psk::recordSelfTensor(recorder, pipeline, ctx->caps(), {features.handle(), 0, kSketchBytes}, {pairs.handle(), 0, kFeatures * 4},
                              {output.handle(), 0, kFeatureBytes}, kRows, kSketch);
    }
};
}  // namespace

TEST(Validation, InvalidVulkanUsageIsReported) {
    const char* require = std::getenv("PSK_REQUIRE_VALIDATION");
    Log log;
    PskContextCreateInfo info{};
    info.flags = require && std::string(require) == "1" ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &Log::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    if (ctx->validationMessageCount() == 0 && log.validation.empty()) {
        // A zero-sized buffer is invalid usage (VUID-VkBufferCreateInfo-size-00912).
        VkBufferCreateInfo bufferInfo{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
        bufferInfo.size = 0;
        bufferInfo.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
        VkBuffer buffer = VK_NULL_HANDLE;
        const VkResult r = ctx->vk().vkCreateBuffer(ctx->device(), &bufferInfo, nullptr, &buffer);
        if (r == VK_SUCCESS && buffer) ctx->vk().vkDestroyBuffer(ctx->device(), buffer, nullptr);
    }
    const uint64_t seen = ctx->validationMessageCount();
    pskDestroyContext(ctx);
    if (!(require && std::string(require) == "1") && seen == 0) GTEST_SKIP() << "validation layer not installed";
    EXPECT_GE(seen, 1u);
    EXPECT_FALSE(log.validation.empty());
}

// Proves synchronization validation is on whenever validation is (lib/vk/instance.cpp): a compute
// dispatch that reads what the previous one wrote, with no barrier between them, must be reported
// as a SYNC-HAZARD message (READ_AFTER_WRITE). On lavapipe commands execute in order, so without
// this check a missing barrier would pass every test and fail only on a GPU. The hazard is made
// by recording each dispatch through a Recorder of its own, which bypasses the recorder's hazard
// tracking (neither knows what the other wrote). It fails with PSK_VALIDATION_SYNC=0.
//
// (The layer of Debian 12, 1.3.239, reports read-after-write and write-after-read between
// dispatches and every hazard involving a copy or fill, but not two dispatches writing the same
// range: docs/RELIABILITY.md.)
TEST(Validation, SynchronizationHazardIsReported) {
    Log log;
    PskContextCreateInfo info{};
    info.flags = validationRequired() ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &Log::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    if (log.layerMissing()) {
        pskDestroyContext(ctx);
        GTEST_SKIP() << "validation layer not installed";
    }
    {
        ChainedDispatches work(ctx);
        const VkPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), psk::selfTensorKernel());
        EXPECT_EQ(log.count("SYNC-HAZARD"), 0u) << "a hazard before the deliberate one";
        recordAndSubmit(ctx, [&](VkCommandBuffer cmd, psk::DescriptorArena* arena) {
            psk::Recorder first(ctx->vk(), cmd, ctx->pipelines(), arena), second(ctx->vk(), cmd, ctx->pipelines(), arena);
            work.recordFirst(ctx, first, pipeline);
            work.recordSecond(ctx, second, pipeline);  // reads `features`, with no barrier
            EXPECT_EQ(first.barrierCount() + second.barrierCount(), 0u);
        });
    }
    const size_t hazards = log.count("SYNC-HAZARD");
    const size_t readAfterWrite = log.count("READ-AFTER-WRITE") + log.count("READ_AFTER_WRITE");
    pskDestroyContext(ctx);
    EXPECT_GE(hazards, 1u) << "no SYNC-HAZARD message for a read of an unsynchronized write: synchronization validation is "
                              "not active (PSK_VALIDATION_SYNC=0, or the layer has no VK_EXT_validation_features)";
    EXPECT_GE(readAfterWrite, 1u);
}

// The counterpart: the same two dispatches through one Recorder get its barrier, and
// synchronization validation accepts it (no message at all).
TEST(Validation, RecorderBarrierSatisfiesSynchronizationValidation) {
    Log log;
    PskContextCreateInfo info{};
    info.flags = validationRequired() ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &Log::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    if (log.layerMissing()) {
        pskDestroyContext(ctx);
        GTEST_SKIP() << "validation layer not installed";
    }
    {
        ChainedDispatches work(ctx);
        const VkPipeline pipeline = psk::kernelPipeline(ctx->pipelines(), psk::selfTensorKernel());
        recordAndSubmit(ctx, [&](VkCommandBuffer cmd, psk::DescriptorArena* arena) {
            psk::Recorder recorder(ctx->vk(), cmd, ctx->pipelines(), arena);
            work.recordFirst(ctx, recorder, pipeline);
            work.recordSecond(ctx, recorder, pipeline);
            EXPECT_EQ(recorder.barrierCount(), 1u);
        });
    }
    const uint64_t seen = ctx->validationMessageCount();
    pskDestroyContext(ctx);
    EXPECT_EQ(seen, 0u);
    for (const std::string& m : log.validation) ADD_FAILURE() << "validation message: " << m;
}

// The same across submissions (the layer's QUEUE_SUBMIT check, enabled through VK_LAYER_ENABLES
// above): a fill submitted, then without waiting for it a copy that reads the filled buffer in a
// second submission, with no semaphore between them, must be reported at the second vkQueueSubmit.
// The library's own submissions wait for their fence, and the suite runs with this check on.
TEST(Validation, SynchronizationHazardAcrossSubmissionsIsReported) {
    const char* enables = std::getenv("VK_LAYER_ENABLES");
    if (!enables || !std::strstr(enables, kQueueSubmitValidationEnable))
        GTEST_SKIP() << "VK_LAYER_ENABLES was set without " << kQueueSubmitValidationEnable;
    Log log;
    PskContextCreateInfo info{};
    info.flags = validationRequired() ? PSK_CONTEXT_REQUIRE_VALIDATION_BIT : PSK_CONTEXT_ENABLE_VALIDATION_BIT;
    info.messageCallback = &Log::callback;
    info.messageUserData = &log;
    PskContext ctx = nullptr;
    ASSERT_EQ(pskCreateContext(&info, &ctx), PSK_SUCCESS);
    if (log.layerMissing()) {
        pskDestroyContext(ctx);
        GTEST_SKIP() << "validation layer not installed";
    }
    {
        const psk::DeviceFunctions& vk = ctx->vk();
        const VkDevice device = ctx->device();
        const VkBufferUsageFlags usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
        psk::Buffer src(ctx->allocator(), 256, usage, psk::MemoryUsage::DeviceLocal);
        psk::Buffer dst(ctx->allocator(), 256, usage, psk::MemoryUsage::DeviceLocal);
        VkCommandPoolCreateInfo poolInfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        poolInfo.queueFamilyIndex = ctx->queueFamily();
        VkCommandPool pool = VK_NULL_HANDLE;
        ASSERT_EQ(vk.vkCreateCommandPool(device, &poolInfo, nullptr, &pool), VK_SUCCESS);
        VkCommandBufferAllocateInfo cbInfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        cbInfo.commandPool = pool;
        cbInfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cbInfo.commandBufferCount = 2;
        VkCommandBuffer cmd[2] = {};
        VkFence fences[2] = {};
        VkFenceCreateInfo fenceInfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        if (vk.vkAllocateCommandBuffers(device, &cbInfo, cmd) == VK_SUCCESS &&
            vk.vkCreateFence(device, &fenceInfo, nullptr, &fences[0]) == VK_SUCCESS &&
            vk.vkCreateFence(device, &fenceInfo, nullptr, &fences[1]) == VK_SUCCESS) {
            VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
            vk.vkBeginCommandBuffer(cmd[0], &begin);
            vk.vkCmdFillBuffer(cmd[0], src.handle(), 0, 256, 1);
            vk.vkEndCommandBuffer(cmd[0]);
            vk.vkBeginCommandBuffer(cmd[1], &begin);
            const VkBufferCopy region{0, 0, 256};
            vk.vkCmdCopyBuffer(cmd[1], src.handle(), dst.handle(), 1, &region);
            vk.vkEndCommandBuffer(cmd[1]);
            EXPECT_EQ(log.count("SYNC-HAZARD"), 0u) << "a hazard inside a command buffer";
            VkQueue queue = VK_NULL_HANDLE;  // the context's queue; nothing else uses it here
            vk.vkGetDeviceQueue(device, ctx->queueFamily(), 0, &queue);
            for (int i = 0; i < 2; ++i) {
                VkSubmitInfo submit{VK_STRUCTURE_TYPE_SUBMIT_INFO};
                submit.commandBufferCount = 1;
                submit.pCommandBuffers = &cmd[i];
                EXPECT_EQ(vk.vkQueueSubmit(queue, 1, &submit, fences[i]), VK_SUCCESS);
            }
            EXPECT_EQ(vk.vkWaitForFences(device, 2, fences, VK_TRUE, UINT64_MAX), VK_SUCCESS);
        } else {
            ADD_FAILURE() << "could not allocate command buffers and fences";
        }
        for (VkFence f : fences)
            if (f) vk.vkDestroyFence(device, f, nullptr);
        vk.vkDestroyCommandPool(device, pool, nullptr);
    }
    const size_t hazards = log.count("SYNC-HAZARD");
    pskDestroyContext(ctx);
    EXPECT_GE(hazards, 1u) << "no SYNC-HAZARD message for a read of another submission's unsynchronized write";
}
