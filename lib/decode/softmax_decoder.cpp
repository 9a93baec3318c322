// psk::SoftmaxDecoder (softmax_decoder.hpp): the KV-cache state machine. A step copies the new k, v
// rows into the cache, then decode_softmax's pass 1 (per chunk of keys: max, sum of exponentials,
// weighted value sum) and pass 2 (merges the chunks of each row).
#include "decode/softmax_decoder.hpp"
#include "kernels/kernel_pipeline.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "forward/attention.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/context.hpp"
#include "vk/submitter.hpp"

namespace psk {

SoftmaxDecoder::SoftmaxDecoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape, uint32_t capacity)
    : Decoder(attention, submitter, shape), capacity_(capacity) {
    createStepF32();  // the step kernels read and write float32
    const VkPhysicalDeviceLimits& limits = context().caps().limits();
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    // One slot's cache must fit a binding; the whole cache may not (4 heads of 128k tokens at
    // h = 64 are 128 MiB + 9 KiB, lavapipe's maxStorageBufferRange is 128 MiB): the step then
    // binds and dispatches slot by slot. Slot strides are rounded up to the offset alignment.
    checkBindingRange("key cache of one sequence and head", uint64_t(capacity_) * std::max(h_, dv_));
    const uint64_t align = std::max<uint64_t>(limits.minStorageBufferOffsetAlignment, 4) / 4;
    kSlot_ = (uint64_t(capacity_) * h_ + align - 1) / align * align;
    vSlot_ = (uint64_t(capacity_) * dv_ + align - 1) / align * align;
    // PSK_DECODE_SPLIT_CACHE=1 forces the slot-by-slot path (for its tests on small caches).
    const char* split = std::getenv("PSK_DECODE_SPLIT_CACHE");
    wholeCache_ = slots * std::max(kSlot_, vSlot_) * 4 <= limits.maxStorageBufferRange &&
                  slots * std::max(kSlot_, vSlot_) < (uint64_t(1) << 32) && !(split && std::string(split) == "1");
    kCache_ = deviceBuffer(slots * kSlot_ * 4);
    vCache_ = deviceBuffer(slots * vSlot_ * 4);
    maxChunks_ = ceilDiv(capacity_, chunk_);
    checkBindingRange("partials", uint64_t(batch_) * Hq_ * maxChunks_ * (dv_ + 2));
    partials_ = deviceBuffer(uint64_t(batch_) * Hq_ * maxChunks_ * (dv_ + 2) * 4);
    kernel::DecodeSoftmaxSpec spec;
    spec.WG = kDecodeWorkgroup;
    spec.HEAD_DIM = h_;
    spec.VALUE_DIM = dv_;
    spec.CHUNK = chunk_;
    Pipelines& pipelines = context().pipelines();
    partial_ = kernelPipeline(pipelines, KernelChoice::make(KernelId::DecodeSoftmaxPartial, "", PSK_DATA_TYPE_FLOAT32, spec,
                                                "softmax decoding: a KV-cache pass per chunk of keys"));
    combine_ = kernelPipeline(pipelines, KernelChoice::make(KernelId::DecodeSoftmaxCombine, "", PSK_DATA_TYPE_FLOAT32, spec,
                                                "softmax decoding: combines the chunks' partials"));
    // The caches need no clearing: positions bound what is read.
}

uint64_t SoftmaxDecoder::stateBytes() const { return uint64_t(batch_) * Hkv_ * capacity_ * (h_ + dv_) * 4; }

BufferRange SoftmaxDecoder::kRows(uint64_t slot, uint64_t rows) const { return {kCache_.handle(), slot * kSlot_ * 4, rows * h_ * 4}; }

BufferRange SoftmaxDecoder::vRows(uint64_t slot, uint64_t rows) const { return {vCache_.handle(), slot * vSlot_ * 4, rows * dv_ * 4}; }

void SoftmaxDecoder::prefill(const PskDecodePrefillInfo& info, uint32_t count) {
    // With out: the forward's rows are the output (it checks every pointer, size and value). The
    // KV cache is the prompt's k and v either way: state only, no attention runs at all.
    if (info.out) attention_.forwardHost(promptForwardInfo(info, count));
    const AttentionConfig& c = attention_.config();
    const uint32_t n = info.seqLen, s0 = info.firstSequence * Hkv_, slots = count * Hkv_;
    const PskTensorStrides kStrides = defaultStrides(c.layout, Hkv_, n, h_);
    const PskTensorStrides vStrides = defaultStrides(c.layout, Hkv_, n, dv_);
    // float32 cache rows (16-bit elements widened exactly).
    const std::vector<float> K = gatherRows(info.k, kStrides, count, Hkv_, 0, n, h_, c.dataType);
    const std::vector<float> V = gatherRows(info.v, vStrides, count, Hkv_, 0, n, dv_, c.dataType);
    Buffer staging = hostBuffer((K.size() + V.size()) * 4, MemoryUsage::HostUpload);
    std::memcpy(staging.mapped(), K.data(), K.size() * 4);
    std::memcpy(staging.mapped() + K.size() * 4, V.data(), V.size() * 4);
    submitter_.run([&](Recorder& rec) {
        for (uint32_t i = 0; i < slots; ++i) {
            const BufferRange k = kRows(s0 + i, n), v = vRows(s0 + i, n);
            rec.copy({staging.handle(), VkDeviceSize(i) * k.size, k.size}, k, k.size);
            rec.copy({staging.handle(), K.size() * 4 + VkDeviceSize(i) * v.size, v.size}, v, v.size);
        }
    });
}

void SoftmaxDecoder::recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>& positions) {
    // Per-sequence counts: [keys this step attends to] then [unused].
    std::vector<uint32_t> counts(size_t(batch_) * 2, 0);
    uint64_t longest = 0;
    for (uint32_t s = 0; s < batch_; ++s) {
        counts[s] = uint32_t(positions[s] + 1);
        longest = std::max(longest, positions[s] + 1);
    }
    recordCounts(rec, counts);
    const uint32_t slots = batch_ * Hkv_;
    const BufferRange meta{meta_.handle(), 0, VkDeviceSize(batch_) * 2 * 4};

    kernel::DecodeSoftmaxPush push{Hq_, Hkv_, Hq_ / Hkv_, capacity_, maxChunks_, 0, attention_.config().scale, uint32_t(kSlot_),
                                   uint32_t(vSlot_), 0, 0, 0};
    // A 16-bit attention's q, k, v rows in float32 (exact), its out computed in float32 then rounded.
    const BufferRange q = stepF32(rec, t.q, 0, batch_ * Hq_, h_), k = stepF32(rec, t.k, 1, slots, h_),
                      v = stepF32(rec, t.v, 2, slots, dv_), out = stepF32(rec, t.out, 3, batch_ * Hq_, dv_);
    for (uint32_t i = 0; i < slots; ++i) {
        const VkDeviceSize pos = positions[i / Hkv_];
        rec.copy({k.buffer, k.offset + VkDeviceSize(i) * h_ * 4, VkDeviceSize(h_) * 4},
                 {kCache_.handle(), (i * kSlot_ + pos * h_) * 4, VkDeviceSize(h_) * 4}, VkDeviceSize(h_) * 4);
        rec.copy({v.buffer, v.offset + VkDeviceSize(i) * dv_ * 4, VkDeviceSize(dv_) * 4},
                 {vCache_.handle(), (i * vSlot_ + pos * dv_) * 4, VkDeviceSize(dv_) * 4}, VkDeviceSize(dv_) * 4);
    }
    const BufferRange partials{partials_.handle(), 0, partials_.size()};
    if (wholeCache_) {
        rec.dispatch(partial_,
                     {reads(q), reads({kCache_.handle(), 0, kCache_.size()}), reads({vCache_.handle(), 0, vCache_.size()}), reads(meta),
                      writes(partials)},
                     &push, sizeof(push), ceilDiv(longest, chunk_), Hq_, batch_);
    } else {
        // One dispatch per (sequence, kv head), binding that slot's caches only.
        for (uint32_t i = 0; i < slots; ++i) {
            push.seq_base = i / Hkv_;
            push.q_head_base = (i % Hkv_) * push.head_ratio;
            push.slot_base = i;
            rec.dispatch(partial_,
                         {reads(q), reads({kCache_.handle(), i * kSlot_ * 4, kSlot_ * 4}),
                          reads({vCache_.handle(), i * vSlot_ * 4, vSlot_ * 4}), reads(meta), writes(partials)},
                         &push, sizeof(push), ceilDiv(positions[i / Hkv_] + 1, chunk_), push.head_ratio, 1);
        }
        push.seq_base = push.q_head_base = push.slot_base = 0;
    }
    rec.dispatch(combine_, {reads(partials), reads(meta), writes(out)}, &push, sizeof(push), Hq_, batch_);
    recordStepOut(rec, t.out, batch_ * Hq_, dv_);
}

void SoftmaxDecoder::forEachBlobRegion(const std::vector<uint64_t>& positions,
                                       const std::function<void(const BufferRange&)>& region) const {
    // Each (sequence, kv head)'s K rows then V rows, up to its position.
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    for (uint64_t i = 0; i < slots; ++i) {
        const uint64_t rows = positions[i / Hkv_];
        if (!rows) continue;
        region(kRows(i, rows));
        region(vRows(i, rows));
    }
}

void SoftmaxDecoder::checkForward(uint64_t position, uint32_t n) const {
    if (position != 0)
        fail(PSK_ERROR_UNSUPPORTED, "a SOFTMAX forward with a decode state starts fresh sequences only (position 0); these are at ",
             position, " (continue them with decode steps)");
    if (n > capacity_)
        fail(PSK_ERROR_BUFFER_TOO_SMALL, "a call of ", n, " tokens does not fit the KV cache (capacity ", capacity_, ")");
}

void SoftmaxDecoder::recordForward(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t) {
    // Position 0: the forward over the call is the whole attention; the cache receives its k and v
    // rows (any strides), one (sequence, kv head) slot per dispatch, which binds that slot only.
    attention_.forward().record(rec, t);
    const uint32_t count = t.geometry.batch, n = t.geometry.tokens;
    const PskTensorStrides kDense = defaultStrides(PSK_LAYOUT_BHND, 1, n, h_), vDense = defaultStrides(PSK_LAYOUT_BHND, 1, n, dv_);
    for (uint32_t b = 0; b < count; ++b)
        for (uint32_t hd = 0; hd < Hkv_; ++hd) {
            const uint64_t slot = uint64_t(first + b) * Hkv_ + hd;
            const PskTensorStrides& ks = t.geometry.k.strides;
            const PskTensorStrides& vs = t.geometry.v.strides;
            recordCopyRows(rec, {t.k, b * ks.batch + hd * ks.head, ks}, {kRows(slot, n), 0, kDense}, 1, 1, n, h_, RowConvert::ToF32);
            recordCopyRows(rec, {t.v, b * vs.batch + hd * vs.head, vs}, {vRows(slot, n), 0, vDense}, 1, 1, n, dv_, RowConvert::ToF32);
        }
}

}  // namespace psk
