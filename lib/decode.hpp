// PskDecodeState_T: incremental decoding (SPEC section 7, docs/DECODING.md). One causal attention's
// state for B sequences: polysketch keeps the running block-state sum z (plus the unfinished
// block's rows in local-exact mode), softmax a KV cache. Externally synchronized with its attention.
#pragma once

#include <polysketch/polysketch.h>

#include <functional>
#include <memory>
#include <vector>

#include "attention.hpp"
#include "memory.hpp"
#include "recorder.hpp"

struct PskDecodeState_T {
public:
    PskDecodeState_T(PskAttention attention, const PskDecodeStateCreateInfo& info);
    ~PskDecodeState_T();
    PskDecodeState_T(const PskDecodeState_T&) = delete;
    PskDecodeState_T& operator=(const PskDecodeState_T&) = delete;

    PskContext context() const { return attention_->context(); }
    uint64_t stateBytes() const;
    uint64_t position(uint32_t sequence) const;

    void prefill(const PskDecodePrefillInfo& info);
    void step(const PskDecodeStepInfo& info);
    void reset(uint32_t sequence);
    /** Size of the blob serialize() writes now. */
    size_t serializedSize() const;
    void serialize(void* data, size_t* size);
    void restore(const void* data, size_t size);

private:
    bool polysketch() const { return kind_ == PSK_ATTENTION_KIND_POLYSKETCH; }
    /** Records with `record` into the state's command buffer, submits and waits. */
    void submit(const std::function<void(psk::Recorder&)>& record, double* gpuMs = nullptr);
    psk::Buffer deviceBuffer(VkDeviceSize bytes);
    psk::Buffer hostBuffer(VkDeviceSize bytes, psk::MemoryUsage usage);
    uint64_t sketchHash() const;
    std::vector<uint8_t> header() const;
    /** Float32 data bytes of the blob for the given positions. */
    uint64_t dataBytes(const std::vector<uint64_t>& positions) const;
    void releaseVulkanObjects();

    PskAttention attention_;
    PskAttentionKind kind_;
    uint32_t batch_ = 1, capacity_ = 0;
    uint32_t Hq_ = 1, Hkv_ = 1, h_ = 1, dv_ = 1, R_ = 0, F_ = 0, b_ = 1;
    bool local_ = false;
    std::vector<uint64_t> positions_;

    // Polysketch state: z [B Hkv][F][dv + 1]; local exact: block rows [B Hkv][b][R | h | dv].
    psk::Buffer z_, blockS_, blockK_, blockV_;
    // Softmax state: caches [B Hkv][capacity][h | dv].
    psk::Buffer kCache_, vCache_;
    uint32_t chunk_ = 1024, maxChunks_ = 1;

    // Per-step scratch, fixed at creation: the step's tensors (host-visible), the one-token
    // forward's workspace and output (polysketch), the softmax partials, and `meta`, per sequence
    // [rows of the unfinished block | key count] then [rows to fold].
    psk::Buffer qIn_, kIn_, vIn_, out_, meta_, stepWorkspace_, stepOut_, partials_;
    VkPipeline fold_ = VK_NULL_HANDLE, output_ = VK_NULL_HANDLE;
    VkPipeline partial_ = VK_NULL_HANDLE, combine_ = VK_NULL_HANDLE;

    VkCommandPool commandPool_ = VK_NULL_HANDLE;
    VkCommandBuffer commandBuffer_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkQueryPool queryPool_ = VK_NULL_HANDLE;
    std::unique_ptr<psk::DescriptorArena> descriptors_;
};
