// psk::Decoder: what a decode state (decode_state.hpp) asks of its kind's state machine
// (polysketch_decoder.hpp: running state z; softmax_decoder.hpp: KV cache), and the pieces both
// kinds share: the step's tensors, the per-sequence row counts `meta`, buffer and host-row helpers.
#pragma once

#include <polysketch/polysketch.h>

#include <functional>
#include <vector>

#include "forward/forward_kind.hpp"
#include "vk/memory.hpp"
#include "vk/recorder.hpp"

struct PskAttention_T;
struct PskContext_T;

namespace psk {

class Submitter;

/** Invocations per workgroup of the decode kernels (decode_output, decode_softmax). */
constexpr uint32_t kDecodeWorkgroup = 64;

/** A state's sequences and heads: B sequences, Hq query and Hkv key/value heads, head dims h and dv. */
struct DecodeShape {
    uint32_t batch = 1, Hq = 1, Hkv = 1, h = 1, dv = 1;
};

/** Step tensors of one call: q [B Hq h], k [B Hkv h], v [B Hkv dv], out [B Hq dv], dense, in the storage type. */
struct StepTensors {
    BufferRange q, k, v, out;
};

class Decoder {
public:
    virtual ~Decoder() = default;
    Decoder(const Decoder&) = delete;
    Decoder& operator=(const Decoder&) = delete;

    /** Device bytes of the state, the positions not included. */
    virtual uint64_t stateBytes() const = 0;
    /** Tokens one sequence's cache holds (softmax); 0 where the state does not grow (polysketch). */
    virtual uint32_t capacity() const { return 0; }
    /** Device scratch of a step (PskForwardStats.workspaceBytes of pskDecodeStepHost). */
    virtual VkDeviceSize stepScratchBytes() const = 0;
    /**
     * Consumes the prompts of sequences info.firstSequence .. + count - 1, whose arguments the
     * state checked (with out == NULL, also q, k and v); the state then sets their positions.
     */
    virtual void prefill(const PskDecodePrefillInfo& info, uint32_t count) = 0;
    /**
     * Records one step at `positions` (which the caller then advances). Both kinds keep the
     * per-sequence counts their step kernel reads on the device and advance them in the step
     * (prefill, forward, reset and restore set them), so a step records one dispatch, no fill,
     * and several recorded steps may be pending at once.
     */
    virtual void recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>& positions) = 0;
    /**
     * Replayable steps (PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT): the positions after the steps the
     * device executed since the last call, from the host's `positions` before them (polysketch:
     * the device's count of steps, then set back to zero; softmax: its key counts), with
     * *dropped the tokens a full cache refused since (softmax; then set back to zero). Submits and
     * waits.
     */
    virtual std::vector<uint64_t> devicePositions(const std::vector<uint64_t>& positions, uint64_t* dropped) = 0;
    /** Empties one sequence's state (the state resets its position). */
    virtual void reset(uint32_t sequence) = 0;
    /**
     * After a restore copied the blob's data in: whatever the kind keeps on the device that
     * follows from the positions (polysketch, local exact: the rows of each unfinished block).
     */
    virtual void restorePositions(const std::vector<uint64_t>&) {}
    /**
     * Calls `region` for every device range of the blob's data at `positions`, in blob order
     * (docs/DECODING.md, "Serialization"). Serialize copies them out and restore copies them in
     * along this one walk, so the two cannot disagree on the layout.
     */
    virtual void forEachBlobRegion(const std::vector<uint64_t>& positions,
                                   const std::function<void(const BufferRange&)>& region) const = 0;

    /**
     * A forward with the state (docs/DECODING.md, "State passing"), sequences `first` ..
     * first + count - 1, all at `position`, n more tokens: fails (with nothing recorded) when the
     * kind cannot continue from there (softmax: a position other than 0, a full cache; polysketch:
     * the position limit).
     */
    virtual void checkForward(uint64_t position, uint32_t n) const = 0;
    /**
     * Records that forward on the call's checked tensors (t.geometry: count sequences of n tokens)
     * and its workspace (stateForwardWorkspaceBytes(t.geometry) bytes): the output rows, then the
     * state of those sequences after the n tokens. The caller advances the positions.
     */
    virtual void recordForward(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) = 0;

protected:
    /** The row-copy pipelines. */
    Decoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape);

    PskContext_T& context() const;
    Buffer deviceBuffer(VkDeviceSize bytes) const;
    Buffer hostBuffer(VkDeviceSize bytes, MemoryUsage usage) const;
    /** Fails (TOO_LARGE) when `floats` floats of the state's `what` exceed one storage-buffer binding. */
    void checkBindingRange(const char* what, uint64_t floats) const;
    /**
     * copy_rows.comp in the attention's storage type: rows [0, rows) of every (batch, head) of
     * `batch` x `heads`, `dim` elements each, from src to dst (bindings, plus element bases and
     * strides).
     */
    struct RowTensor {
        BufferRange binding;
        uint64_t base = 0;  // elements from the binding's start to row 0 of (batch 0, head 0)
        PskTensorStrides strides{};
    };
    /**
     * The element types of a row copy: both the storage type, storage type to float32 (exact), or
     * float32 to the storage type (rounded to nearest even, as the forward stores):
     * copy_rows_convert. For a float32 attention all three are the plain copy.
     */
    enum class RowConvert { None, ToF32, FromF32 };
    void recordCopyRows(Recorder& rec, const RowTensor& src, const RowTensor& dst, uint32_t batch, uint32_t heads, uint32_t rows,
                        uint32_t dim, RowConvert convert = RowConvert::None) const;

    /** Bytes of one element of the attention's storage type. */
    size_t storageBytes() const { return eb_; }

    PskAttention_T& attention_;
    Submitter& submitter_;  // the state's: for the submissions of prefill, reset, creation
    const uint32_t batch_, Hq_, Hkv_, h_, dv_;
    VkPipeline copyRows_ = VK_NULL_HANDLE;  // copy_rows.comp, the attention's storage type
    // copy_rows_convert: storage type -> float32 and back (16-bit attention objects only).
    VkPipeline toF32_ = VK_NULL_HANDLE, fromF32_ = VK_NULL_HANDLE;
    size_t eb_ = 4;
};

/**
 * Workspace bytes of pskCmdAttentionForward with a decode state of `attention` for `geometry`, at
 * any position (pskGetStateWorkspaceSize): polysketch the forward's own workspace plus the
 * last block's value rows and, local exact, the staged tensors of a call that starts inside a
 * block (b - 1 rows in front); softmax the forward's. Other kinds and non-causal attention:
 * UNSUPPORTED. Throws TOO_LARGE as the forward does.
 */
VkDeviceSize stateForwardWorkspaceBytes(const PskAttention_T& attention, const ForwardGeometry& geometry);
/** Its regions (forward/workspace.hpp), which a host call may split into several buffers. */
WorkspaceLayout stateForwardWorkspaceLayout(const PskAttention_T& attention, const ForwardGeometry& geometry);

/** A device-local state buffer (storage and transfer usage; 16 bytes at least). */
Buffer decodeDeviceBuffer(Allocator& allocator, VkDeviceSize bytes);
/** A mapped host-visible buffer for staging (storage and transfer usage; 16 bytes at least). */
Buffer decodeHostBuffer(Allocator& allocator, VkDeviceSize bytes, MemoryUsage usage);

/** The attention's forward call over a prefill's prompt (its arrays and sizes, `count` sequences). */
PskForwardHostInfo promptForwardInfo(const PskDecodePrefillInfo& info, uint32_t count);

/**
 * Copies rows [t0, t0 + rows) of every (b, head) of a strided host tensor of `type` elements into
 * dense float32 [b][head][rows][dim] (16-bit elements widened exactly).
 */
std::vector<float> gatherRows(const void* data, const PskTensorStrides& s, uint32_t batch, uint32_t heads, uint32_t t0,
                              uint32_t rows, uint32_t dim, PskDataType type);

}  // namespace psk
