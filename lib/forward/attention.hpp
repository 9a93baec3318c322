// PskAttention_T: one attention layer's configuration plus everything cached for it (pipelines,
// the submitter of its host calls, device tensors). Externally synchronized.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <functional>
#include <memory>
#include <vector>

#include "forward/attention_config.hpp"
#include "forward/forward_kind.hpp"
#include "forward/polysketch_forward.hpp"
#include "vk/context.hpp"
#include "vk/memory.hpp"
#include "vk/recorder.hpp"
#include "vk/submitter.hpp"

struct PskAttention_T {
public:
    PskAttention_T(PskContext context, const PskAttentionCreateInfo& info);
    /**
     * With the forward stages that may take cooperative kernels (CoopStageBit) narrowed to
     * `coopStages`; `selfTestProbe`: an attention the cooperative self-test runs, which runs none
     * of its own (forward/coopmat_self_test.hpp), walking the block states as `probeWalk` says.
     */
    PskAttention_T(PskContext context, const PskAttentionCreateInfo& info, uint32_t coopStages, bool selfTestProbe,
                   psk::AttentionConfig::ProbeWalk probeWalk = psk::AttentionConfig::ProbeWalk::Plan);
    ~PskAttention_T();
    PskAttention_T(const PskAttention_T&) = delete;
    PskAttention_T& operator=(const PskAttention_T&) = delete;

    PskContext context() const { return context_; }
    /**
     * The tuning table in effect when the attention was created (the one its plan read); null
     * without one. What else the attention plans later (a softmax forward continuing a KV cache)
     * reads the same.
     */
    const psk::TuningTable* tuningTable() const { return tuning_.table.get(); }
    const psk::AttentionConfig& config() const { return config_; }

    /**
     * Records into the same command buffer after the forward, with the call's tensors and
     * workspace (decode prefill reads the intermediates it needs there, in the same submission).
     */
    using RecordAfterForward = std::function<void(psk::Recorder&, const psk::BoundTensors&)>;
    /**
     * What a forward with a decode state (decode/decode_state.cpp) records instead of the kind's
     * forward, on the call's checked tensors, and the workspace it needs for the call's geometry.
     * With orderAfterEarlierWork, pskCmdAttentionForward records a memory barrier first (the
     * state's buffers may have been written by commands recorded before).
     */
    struct Override {
        std::function<psk::WorkspaceLayout(const psk::ForwardGeometry&)> workspaceLayout;
        std::function<void(psk::Recorder&, const psk::BoundTensors&)> record;
        bool orderAfterEarlierWork = false;
    };
    void forwardHost(const PskForwardHostInfo& info, const RecordAfterForward& after = {}, const Override* override = nullptr);
    /** Records the forward into the app's command buffer on the app's buffers (pskCmdAttentionForward). */
    void cmdForward(VkCommandBuffer commandBuffer, const PskCmdForwardInfo& info, const Override* override = nullptr);
    /** Frees the descriptor sets of cmdForward calls (the app says their command buffers completed). */
    void resetCommandDescriptors();
    /** Workspace bytes of a call with this geometry in one buffer (0 when the kind needs none). */
    VkDeviceSize workspaceBytes(const psk::ForwardGeometry& geometry) const;
    /** The workspace regions of a call with this geometry (forward/workspace.hpp). */
    psk::WorkspaceLayout workspaceLayout(const psk::ForwardGeometry& geometry) const { return forward_->workspaceLayout(geometry); }
    /**
     * How the host form splits a layout into buffers: next fit under the context's largest
     * allocation (maxBufferSize 0 of pskGetWorkspaceLayout); TOO_LARGE naming a region that
     * exceeds it alone.
     */
    psk::WorkspacePacking hostPacking(const psk::WorkspaceLayout& layout) const;

    /** The forward kind's object: its kernels (`psk info --plan`), workspace and recording. */
    const psk::ForwardKind& forward() const { return *forward_; }
    /** The polysketch object (plan, sketch, resources), or null for the other kinds. */
    const psk::PolysketchForward* polysketch() const { return polysketch_; }

    // For tests of the individual kernels: the intermediates of the last host-array call stay in
    // the workspace buffer (its layout: PolysketchForward::workspace(), when it was one buffer).
    const psk::Buffer& workspaceBuffer() const { return workspaces_.empty() ? noBuffer_ : workspaces_[0]; }
    /** Buffers the last successful host-array call's workspace was split into (tests: the split happened). */
    size_t lastWorkspaceBufferCount() const { return lastWorkspaceBuffers_; }

private:
    /**
     * Variable-length packed batches (cuSeqlens): `g` is the geometry of batch 1 and the total
     * tokens. Checks the offsets (and that each sequence's start is an aligned buffer offset),
     * returns the workspace the largest sequence needs; recordVarlen records each non-empty
     * sequence as its own forward on its ranges of `t`, sequence after sequence, sharing t.workspace.
     */
    psk::WorkspaceLayout checkVarlen(const psk::ForwardGeometry& g, const uint32_t* cuSeqlens, uint32_t sequences) const;
    void recordVarlen(psk::Recorder& rec, const psk::BoundTensors& t, const uint32_t* cuSeqlens, uint32_t sequences) const;
    /** Frees the cached device tensors of host-array calls (after an allocation failure). */
    void releaseCachedTensors();
    /** Grows `buffer` to at least `bytes` (device-local, storage + transfer usage). */
    void ensureBuffer(psk::Buffer& buffer, VkDeviceSize bytes, psk::MemoryUsage usage);

    PskContext context_;
    psk::TuningSelection tuning_;  // selected once (PSK_TUNING_TABLE is read and parsed here), for every plan
    psk::AttentionConfig config_;                      // resolveAttention's, with the cooperative stages the self-test left
    std::shared_ptr<const psk::PackedSketch> sketch_;  // POLYSKETCH only
    std::unique_ptr<psk::ForwardKind> forward_;
    const psk::PolysketchForward* polysketch_ = nullptr;  // forward_, when the kind is POLYSKETCH

    // The host calls' command buffer, fence, timestamps and descriptor arena; created last, after
    // the pipelines, so that an invalid configuration fails before any of it exists.
    std::unique_ptr<psk::Submitter> submitter_;
    // Descriptor sets of pskCmdAttentionForward (no push descriptors): kept until
    // pskResetCommandDescriptors or destruction, since the app's command buffers may still run.
    std::unique_ptr<psk::DescriptorArena> commandDescriptors_;

    // Cached device tensors for host-array calls, grown on demand. The workspace is one buffer per
    // buffer of the call's packing (hostPacking), each reused by later calls while large enough.
    psk::Buffer q_, k_, v_, out_;
    std::vector<psk::Buffer> workspaces_;
    psk::Buffer upload_, readback_;
    psk::Buffer noBuffer_;
    size_t lastWorkspaceBuffers_ = 0;
};
