// psk::SoftmaxDecoder: the softmax (baseline) decode state machine, a KV cache of a fixed capacity
// per (sequence, key/value head) read by the one-dispatch step decode_softmax.comp, split over
// slices of the keys (docs/DECODING.md, "Softmax KV-cache step").
#pragma once

#include "decode/decoder.hpp"
#include "forward/tuning_table.hpp"
#include "kernels/kernel_dispatch.hpp"

#include <optional>
#include <string>

namespace psk {

class SoftmaxDecoder final : public Decoder {
public:
    /** The cache of `capacity` tokens (1 to kMaxDecodeCapacity, checked by the state) and the step's pipelines. */
    SoftmaxDecoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape, uint32_t capacity);

    uint64_t stateBytes() const override;
    uint32_t capacity() const override { return capacity_; }
    VkDeviceSize stepScratchBytes() const override { return work_.size(); }
    void prefill(const PskDecodePrefillInfo& info, uint32_t count) override;
    void recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>& positions) override;
    /** The sequence's key count on the device back to 0 (the cache needs no clearing: the count bounds what is read). */
    void reset(uint32_t sequence) override;
    void restorePositions(const std::vector<uint64_t>& positions) override;
    std::vector<uint64_t> devicePositions(const std::vector<uint64_t>& positions, uint64_t* dropped) override;
    void forEachBlobRegion(const std::vector<uint64_t>& positions,
                           const std::function<void(const BufferRange&)>& region) const override;
    /** The cache must hold position + n tokens; past position 0, the split-key kernels must exist here. */
    void checkForward(uint64_t position, uint32_t n) const override;
    /**
     * Position 0: the softmax forward, then the call's k and v rows into the cache. Later: the rows
     * into the cache first, then the call's queries over the cache (attention_flash_fp32's
     * softmax_cache variant, keys split across workgroups, merged by attention_combine).
     */
    void recordForward(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) override;

private:
    /** The K rows, then the V rows of slot i's first `rows` tokens. */
    BufferRange kRows(uint64_t slot, uint64_t rows) const;
    BufferRange vRows(uint64_t slot, uint64_t rows) const;
    /** The call's queries over the cache (which holds its rows already) into t.out, at position > 0. */
    void recordCacheAttention(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) const;
    /** Records the fills that set the device's key counts of sequences first.. to `positions`. */
    void recordKeyCounts(Recorder& rec, uint32_t first, const std::vector<uint64_t>& positions) const;

    uint32_t capacity_ = 0;
    VkDeviceSize droppedWord_ = 0;  // the count of tokens a full cache refused (devicePositions)
    // Caches [B Hkv][capacity][h | dv], slots kSlot_ / vSlot_ floats apart (capacity h, capacity dv,
    // rounded up to the storage offset alignment).
    Buffer kCache_, vCache_;
    uint64_t kSlot_ = 0, vSlot_ = 0;
    bool wholeCache_ = true;  // the whole cache fits one binding: one dispatch per step
    // The step's slices (decode_softmax.comp): keys per workgroup between kTile and maxSlice_, so
    // that a step has about splits_ workgroups per slot; groupStride_ workgroups per slot at most.
    uint32_t splits_ = 1, maxSlice_ = 1024, forcedSlice_ = 0, groupStride_ = 1;
    // The step's workspace (decode_softmax.comp): B key counts (the device advances them), B Hkv
    // slot and B sequence counters (zero between steps), the workgroups' partials.
    Buffer work_;
    KernelPipeline step_;
    // A forward continuing the cache (position > 0): its kernels (cacheShort_ for calls of at most
    // kCacheShortBlock tokens), or why there are none.
    KernelPipeline cacheForward_, cacheShort_, combine_;
    std::string cacheUnsupported_;
};

/** Calls of at most this many tokens continuing a softmax cache take the short-block tiling. */
constexpr uint32_t kCacheShortBlock = 8;

/**
 * The tiling of a softmax forward continuing the KV cache with n query rows per sequence: 8 rows
 * per workgroup for n <= kCacheShortBlock where that fits (a short block would leave most of a
 * larger workgroup idle), else the tiling `tuning` measured best for the shape class
 * (baselines.fp32_tile, where it fits), else the FP32 FlashAttention-2 kernel's model tiling;
 * nullopt where there is none or under PSK_FP32_BASELINE=rows. (A table's baselines.fp32_rows 1
 * does not apply: the one-row kernel has no split keys.)
 */
std::optional<kernel::AttentionFlashFp32Spec> softmaxCacheSpec(const DeviceCaps& caps, const AttentionConfig& config, uint32_t n,
                                                               const TuningTable* tuning = nullptr);

/**
 * Splits of the keys of a softmax forward continuing a KV cache (a short query block against a long
 * cache: flash decoding's arrangement) for `batch` sequences of n query rows: enough workgroups to
 * fill the device whatever the position, so the workspace does not depend on it; 1 to 32.
 * PSK_SOFTMAX_CACHE_SPLITS=s forces s (tests).
 */
uint32_t softmaxCacheSplits(const DeviceCaps& caps, const AttentionConfig& config, uint32_t batch, uint32_t n, uint32_t rows);
/** Workspace bytes of that forward's split states for calls of up to n rows (non-decreasing in n; 0 where the device has no kernel for it). */
uint64_t softmaxCacheForwardBytes(const DeviceCaps& caps, const AttentionConfig& config, uint32_t batch, uint32_t n,
                                  const TuningTable* tuning = nullptr);

/** The largest capacity a softmax decode state accepts. */
constexpr uint32_t kMaxDecodeCapacity = 1u << 24;

}  // namespace psk
