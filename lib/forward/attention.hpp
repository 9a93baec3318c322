// PskAttention_T: one attention layer's configuration plus everything cached for it (pipelines,
// command buffer, timestamp queries, device tensors). Externally synchronized.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <memory>

#include "forward/attention_config.hpp"
#include "vk/context.hpp"
#include "forward/kernels.hpp"
#include "vk/memory.hpp"
#include "vk/recorder.hpp"

struct PskAttention_T {
public:
    PskAttention_T(PskContext context, const PskAttentionCreateInfo& info);
    ~PskAttention_T();
    PskAttention_T(const PskAttention_T&) = delete;
    PskAttention_T& operator=(const PskAttention_T&) = delete;

    PskContext context() const { return context_; }
    const psk::AttentionConfig& config() const { return config_; }

    void forwardHost(const PskForwardHostInfo& info);
    /** Records the forward into the app's command buffer on the app's buffers (pskCmdAttentionForward). */
    void cmdForward(VkCommandBuffer commandBuffer, const PskCmdForwardInfo& info);
    /** Frees the descriptor sets of cmdForward calls (the app says their command buffers completed). */
    void resetCommandDescriptors();
    /** Workspace bytes of a call with this geometry (0 when the kind needs none). */
    VkDeviceSize workspaceBytes(const psk::ForwardGeometry& geometry) const;

    // For tests of the individual kernels: the intermediates of the last host-array call stay in
    // the workspace buffer (its layout: polysketchWorkspace()).
    const psk::Buffer& workspaceBuffer() const { return workspace_; }
    const psk::PolysketchPlan& polysketchPlan() const { return polysketchPlan_; }
    const psk::PolysketchResources& polysketchResources() const { return polysketch_; }
    /** The packed sketch (decode states hash it to recognize their attention in a blob). */
    const psk::PackedSketch& packedSketch() const { return sketch_; }

private:
    void releaseVulkanObjects();
    /** Frees the cached device tensors of host-array calls (after an allocation failure). */
    void releaseCachedTensors();
    /** Records the kernels for one call into `recorder`. */
    void recordForward(psk::Recorder& recorder, const psk::BoundTensors& tensors);
    /** Grows `buffer` to at least `bytes` (device-local, storage + transfer usage). */
    void ensureBuffer(psk::Buffer& buffer, VkDeviceSize bytes, psk::MemoryUsage usage);

    PskContext context_;
    psk::AttentionConfig config_;
    psk::TiledAttentionPlan tiledPlan_;
    VkPipeline tiledPipeline_ = VK_NULL_HANDLE;

    // Polysketch: the packed sketch (host copy kept for its offsets), its device copy, the pair
    // table of the self-tensoring, and the plan of the kernels.
    void createPolysketch(const PskAttentionCreateInfo& info);
    /** Creates a device-local buffer holding `bytes` of `data` (staged when not host-visible). */
    psk::Buffer uploadConstant(const void* data, VkDeviceSize bytes);
    psk::PackedSketch sketch_;
    psk::PolysketchPlan polysketchPlan_;
    psk::PolysketchResources polysketch_;
    psk::Buffer sketchWeights_, pairTable_;

    VkCommandPool commandPool_ = VK_NULL_HANDLE;
    VkCommandBuffer commandBuffer_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkQueryPool queryPool_ = VK_NULL_HANDLE;
    std::unique_ptr<psk::DescriptorArena> descriptors_;
    // Descriptor sets of pskCmdAttentionForward (no push descriptors): kept until
    // pskResetCommandDescriptors or destruction, since the app's command buffers may still run.
    std::unique_ptr<psk::DescriptorArena> commandDescriptors_;

    // Cached device tensors for host-array calls, grown on demand.
    psk::Buffer q_, k_, v_, out_, workspace_;
    psk::Buffer upload_, readback_;
};
