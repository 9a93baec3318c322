// PskDecodeState_T: incremental decoding (docs/MATH.md section 7, docs/DECODING.md). One causal attention's
// state for B sequences: polysketch keeps the running block-state sum z (plus the unfinished
// block's rows in local-exact mode), softmax a KV cache. Externally synchronized with its attention.
#pragma once

#include <polysketch/polysketch.h>
#include <polysketch/polysketch_vulkan.h>

#include <functional>
#include <memory>
#include <vector>

#include "forward/attention.hpp"
#include "forward/polysketch_forward.hpp"
#include "vk/memory.hpp"
#include "vk/recorder.hpp"

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
    /** Records one step into the app's command buffer on the app's buffers (pskCmdDecodeStep). */
    void cmdStep(VkCommandBuffer commandBuffer, const PskCmdDecodeStepInfo& info);
    /** Frees the descriptor sets of cmdStep calls (the app says their command buffers completed). */
    void resetCommandDescriptors();
    void reset(uint32_t sequence);
    /** Size of the blob serialize() writes now. */
    size_t serializedSize() const;
    void serialize(void* data, size_t* size);
    void restore(const void* data, size_t size);

private:
    bool polysketch() const { return kind_ == PSK_ATTENTION_KIND_POLYSKETCH; }
    /** Step tensors of one call: q [B Hq h], k [B Hkv h], v [B Hkv dv], out [B Hq dv], dense float32. */
    struct StepTensors {
        psk::BufferRange q, k, v, out;
    };
    /** Bytes of q, k, v, out of one step. */
    void stepBytes(uint64_t bytes[4]) const;
    /** Fails (BUFFER_TOO_SMALL) when a softmax sequence's cache is full. */
    void checkRoomForStep() const;
    /**
     * Records one step at the current positions (which the caller then advances): the per-sequence
     * row counts are written into the device buffer meta_ by fills inside the recording, so every
     * recorded step carries its own and several may be pending at once.
     */
    void recordStep(psk::Recorder& rec, const StepTensors& t);
    /** Polysketch: the forward's feature map over the step's token into the step workspace. */
    void recordStepFeatures(psk::Recorder& rec, const StepTensors& t, const psk::ForwardGeometry& g1,
                            const psk::PolysketchWorkspace& ws);
    /**
     * Polysketch, recorded right after the attention's forward over `n` tokens of sequences'
     * slots s0.. (`forward`: that call's tensors and workspace, which holds Z_{t-1} and the S(k),
     * k' rows): z = Z_{t-1} (accumulate: z += Z_{t-1}) plus the last block, folded into z or,
     * local exact and unfinished, into h with its rows kept. `v` is the prompt's v (count
     * sequences of n tokens, strides vStrides). `staging` and `prefix` receive the scratch buffers
     * the recording uses; the caller keeps them until the submission completes.
     */
    void recordAbsorbPrompt(psk::Recorder& rec, const psk::BoundTensors& forward, const void* v, const PskTensorStrides& vStrides,
                            uint32_t count, uint32_t n, uint32_t s0, bool accumulate, psk::Buffer& staging, psk::Buffer& prefix);
    /** Polysketch prefill with out == NULL: the forward over the prompt, in chunks of whole blocks when needed. */
    void prefillPolysketchStateOnly(const PskDecodePrefillInfo& info, uint32_t count);
    /** Checks a prompt's arrays when prefill produces no output (out == NULL). */
    void checkPromptInputs(const PskDecodePrefillInfo& info, uint32_t count) const;
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

    // Polysketch state: z [B Hkv][F][dv + 1] (local exact: completed blocks only); local exact
    // also the unfinished block's running sum h [B Hkv][F][dv + 1] of phi(k_j)[v_j | 1] and its
    // rows k' [B Hkv][b][h], v [B Hkv][b][dv] for the exact local part.
    psk::Buffer z_, blockH_, blockK_, blockV_;
    // Softmax state: caches [B Hkv][capacity][h | dv], slots kSlot_ / vSlot_ floats apart.
    psk::Buffer kCache_, vCache_;
    uint64_t kSlot_ = 0, vSlot_ = 0;  // floats per slot (capacity h, capacity dv, aligned)
    bool wholeCache_ = true;          // the whole cache fits one binding: one dispatch per step
    uint32_t chunk_ = 1024, maxChunks_ = 1;

    // Per-step scratch, fixed at creation: the step's tensors (host-visible), the feature rows of
    // the one-token forward's workspace (polysketch), the softmax partials, and `meta` (device-local,
    // written by fills in each recorded step), per sequence [rows of the unfinished block | key
    // count] then [rows to fold].
    psk::Buffer qIn_, kIn_, vIn_, out_, meta_, stepWorkspace_, partials_;
    std::vector<psk::KernelChoice> kernels_;  // the step's kernels (fold + output, or partial + combine)
    VkPipeline fold_ = VK_NULL_HANDLE, output_ = VK_NULL_HANDLE;
    VkPipeline partial_ = VK_NULL_HANDLE, combine_ = VK_NULL_HANDLE;

    VkCommandPool commandPool_ = VK_NULL_HANDLE;
    VkCommandBuffer commandBuffer_ = VK_NULL_HANDLE;
    VkFence fence_ = VK_NULL_HANDLE;
    VkQueryPool queryPool_ = VK_NULL_HANDLE;
    std::unique_ptr<psk::DescriptorArena> descriptors_;
    // Descriptor sets of pskCmdDecodeStep (no push descriptors): kept until
    // pskResetDecodeCommandDescriptors or destruction, since the app's command buffers may still run.
    std::unique_ptr<psk::DescriptorArena> commandDescriptors_;
};
