// PskAttention_T: one attention layer's configuration plus everything cached for it (pipelines,
// command buffer, timestamp queries, device tensors). Externally synchronized.
#pragma once

#include <polysketch/polysketch.h>

#include <memory>

#include "attention_config.hpp"
#include "context.hpp"
#include "kernels.hpp"
#include "memory.hpp"
#include "recorder.hpp"

struct PskAttention_T {
public:
    PskAttention_T(PskContext context, const PskAttentionCreateInfo& info);
    ~PskAttention_T();
    PskAttention_T(const PskAttention_T&) = delete;
    PskAttention_T& operator=(const PskAttention_T&) = delete;

    PskContext context() const { return context_; }
    const psk::AttentionConfig& config() const { return config_; }

    void forwardHost(const PskForwardHostInfo& info);

private:
    void releaseVulkanObjects();
    /** Records the kernels for one call into `recorder`. */
    void recordForward(psk::Recorder& recorder, const psk::BoundTensors& tensors);
    /** Grows `buffer` to at least `bytes` (device-local, storage + transfer usage). */
    void ensureBuffer(psk::Buffer& buffer, VkDeviceSize bytes, psk::MemoryUsage usage);

    PskContext context_;
    psk::AttentionConfig config_;
    psk::TiledAttentionPlan tiledPlan_;
    VkPipeline tiledPipeline_ = VK_NULL_HANDLE;

    VkCommandPool commandPool_ = VK_NULL_HANDLE;
    VkCommandBuffer commandBuffer_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkQueryPool queryPool_ = VK_NULL_HANDLE;
    std::unique_ptr<psk::DescriptorArena> descriptors_;

    // Cached device tensors for host-array calls, grown on demand.
    psk::Buffer q_, k_, v_, out_, workspace_;
    psk::Buffer upload_, readback_;
};
