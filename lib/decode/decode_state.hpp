// PskDecodeState_T: incremental decoding (docs/MATH.md section 7, docs/DECODING.md), the object
// behind PskDecodeState. One causal attention's state for B sequences: it checks the arguments of
// every call, keeps the positions and a step's host staging, and hands the state itself to its
// kind's state machine (decoder.hpp: polysketch keeps the running block-state sum z, softmax a KV
// cache). Externally synchronized with its attention.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <memory>
#include <vector>

#include "decode/decode_blob.hpp"
#include "decode/decoder.hpp"
#include "forward/attention.hpp"
#include "vk/submitter.hpp"

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
    /** pskAttentionForwardHost with info.state == this (docs/DECODING.md, "State passing"). */
    void forwardHost(PskAttention attention, const PskForwardHostInfo& info);
    /** pskCmdAttentionForward with info.state == this. */
    void cmdForward(PskAttention attention, VkCommandBuffer commandBuffer, const PskCmdForwardInfo& info);
    void step(const PskDecodeStepInfo& info);
    /** Records one step into the app's command buffer on the app's buffers (pskCmdDecodeStep). */
    void cmdStep(VkCommandBuffer commandBuffer, const PskCmdDecodeStepInfo& info);
    /** Frees the descriptor sets of cmdStep calls (the app says their command buffers completed). */
    void resetCommandDescriptors();
    void reset(uint32_t sequence);
    /** Size of the blob serialize() writes now. */
    size_t serializedSize() const;
    void serialize(void* data, size_t* size);
    void restore(const void* data, size_t size);

    /** What the last step (host or recorded) recorded, for the tests of a step's cost. */
    struct StepRecording {
        uint32_t dispatches = 0, copies = 0, fills = 0, barriers = 0, submits = 0;
    };
    const StepRecording& lastStepRecording() const { return lastStep_; }

private:
    /** Bytes of q, k, v, out of one step. */
    void stepBytes(uint64_t bytes[4]) const;
    /** Fails (BUFFER_TOO_SMALL) when a sequence's cache is full (softmax). */
    void checkRoomForStep() const;
    /**
     * Checks a forward with this state by `attention` over sequences first .. first + batchSize
     * - 1 (0 means 1) of seqLen more tokens, before anything is recorded or written; returns
     * their common position.
     */
    uint64_t checkForward(PskAttention attention, uint32_t batchSize, uint32_t seqLen, uint32_t first) const;
    /** The attention's recording of such a forward (workspace, record). */
    PskAttention_T::Override forwardOverride(uint32_t first, uint64_t position, bool recorded);
    /** Checks a prompt's arrays when prefill produces no output (out == NULL). */
    void checkPromptInputs(const PskDecodePrefillInfo& info, uint32_t count) const;
    psk::DecodeBlobHeader blobHeader() const;
    /** Bytes of the blob's data (after the positions) at `positions`. */
    uint64_t blobDataBytes(const std::vector<uint64_t>& positions) const;
    /** Copies the blob's data at `positions` from the state into `host` (toHost) or back. */
    void transferBlobData(const std::vector<uint64_t>& positions, const psk::Buffer& host, bool toHost);

    /**
     * Replayable steps (PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT): the device may be ahead of
     * positions_ by steps the app replayed, so every call that needs the positions reads them back
     * (the decoder's devicePositions; a copy and a wait). Fails (BUFFER_TOO_SMALL) once when
     * replayed softmax steps found a full cache.
     */
    void syncPositions() const;
    /** After a step is recorded: the positions advance (or, replayable, the device is ahead). */
    void advancePositions();

    PskAttention attention_;
    psk::DecodeShape shape_;
    mutable std::vector<uint64_t> positions_;
    bool replayable_ = false;

    // The submissions of host calls; the decoder submits through it too, so it outlives decoder_.
    std::unique_ptr<psk::Submitter> submitter_;
    std::unique_ptr<psk::Decoder> decoder_;
    // A host step's tensors, fixed at creation.
    psk::Buffer qIn_, kIn_, vIn_, out_;
    // Descriptor sets of pskCmdDecodeStep (no push descriptors): kept until
    // pskResetDecodeCommandDescriptors or destruction, since the app's command buffers may still run.
    std::unique_ptr<psk::DescriptorArena> commandDescriptors_;
    StepRecording lastStep_;
};
