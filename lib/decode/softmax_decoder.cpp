// psk::SoftmaxDecoder (softmax_decoder.hpp): the KV-cache state machine. A step is one dispatch of
// decode_softmax.comp (flash decoding): per (sequence, key/value head), workgroups over slices of
// the keys write (max, sum of exponentials, weighted value sum) and the last of them merges them;
// the token's k, v rows enter the cache inside the same dispatch, and the key counts live on the
// device (the step advances them).
#include "decode/softmax_decoder.hpp"
#include "kernels/kernel_pipeline.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "forward/attention.hpp"
#include "forward/tiled_forward.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/context.hpp"
#include "vk/submitter.hpp"

namespace psk {

SoftmaxDecoder::SoftmaxDecoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape, uint32_t capacity)
    : Decoder(attention, submitter, shape), capacity_(capacity) {
    const DeviceCaps& caps = context().caps();
    const VkPhysicalDeviceLimits& limits = caps.limits();
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    const uint32_t ratio = Hq_ / Hkv_;
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

    // The slices of a step: about 16 workgroups per multiprocessor in all where the driver reports
    // the count, else 2048 on a GPU and 8 on a CPU device (llvmpipe runs workgroups on a few
    // threads), at most 1024 / (Hq / Hkv) keys per workgroup (the kernel's loops per invocation
    // under llvmpipe's limit) and at least one tile of kDecodeWorkgroup keys. Unlike the
    // polysketch step's fixed work, a slice is a serial walk over its keys whose every tile waits
    // for memory: many short slices resident at once hide that latency (docs/MODEL.md, "The
    // softmax decode step"). PSK_DECODE_SOFTMAX_SLICE=n forces n keys per workgroup (tests of the
    // combine on small caches).
    const uint32_t target = caps.multiprocessorCount              ? 16 * caps.multiprocessorCount
                            : caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 8
                                                                                        : 2048;
    splits_ = uint32_t(std::max<uint64_t>(1, (target + slots - 1) / slots));
    maxSlice_ = std::max(kDecodeWorkgroup, 1024 / ratio / kDecodeWorkgroup * kDecodeWorkgroup);
    if (const char* forced = std::getenv("PSK_DECODE_SOFTMAX_SLICE")) forcedSlice_ = uint32_t(std::max(0, std::atoi(forced)));
    const uint64_t groupStride = forcedSlice_ ? ceilDiv(uint64_t(capacity_), uint64_t(forcedSlice_))
                                              : std::max<uint64_t>(splits_, ceilDiv(uint64_t(capacity_), uint64_t(maxSlice_)));
    if (groupStride > limits.maxComputeWorkGroupCount[0] || slots > limits.maxComputeWorkGroupCount[1])
        fail(PSK_ERROR_TOO_LARGE, "a softmax decode step of ", slots, " sequence heads and ", groupStride,
             " key slices needs more workgroups than the device allows");
    groupStride_ = uint32_t(groupStride);
    const uint64_t sharedFloats = uint64_t(ratio) * h_ + h_ + dv_ + 2 * uint64_t(ratio) * kDecodeWorkgroup + 1;
    if (sharedFloats * 4 > limits.maxComputeSharedMemorySize)
        fail(PSK_ERROR_TOO_LARGE, "a softmax decode step needs ", sharedFloats * 4, " bytes of shared memory, more than the device's ",
             limits.maxComputeSharedMemorySize);
    // The last word counts the tokens a full cache refused (only a replayable step can meet one).
    const uint64_t words = 2 * uint64_t(batch_) + slots + slots * groupStride * ratio * (dv_ + 2) + 1;
    droppedWord_ = words - 1;
    checkBindingRange("softmax step workspace", words);
    work_ = deviceBuffer(words * 4);

    kernel::DecodeSoftmaxSpec spec;
    spec.WG = kDecodeWorkgroup;
    spec.HEAD_DIM = h_;
    spec.VALUE_DIM = dv_;
    spec.HEAD_RATIO = ratio;
    // The maxima by subgroup operations where the device has them in compute (one barrier for a
    // tile's instead of log2 WG), else a tree in shared memory.
    // PSK_DECODE_SOFTMAX_TREE=1 keeps the tree (its tests on devices that have subgroup arithmetic).
    const char* tree = std::getenv("PSK_DECODE_SOFTMAX_TREE");
    const bool subgroupReduce = (caps.subgroupOperations & (VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT)) ==
                                    (VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                                !(tree && std::string(tree) == "1");
    step_ = kernelPipeline(context().pipelines(),
                           KernelChoice::make<KernelId::DecodeSoftmax>(subgroupReduce ? "subgroup" : "tree", attention.config().dataType, spec,
                                              subgroupReduce ? "softmax decoding: one dispatch over slices of the KV cache, combined by the "
                                                               "last; maxima by subgroup operations"
                                                             : "softmax decoding: one dispatch over slices of the KV cache, combined by the "
                                                               "last; maxima by a tree in shared memory (no subgroup arithmetic)"));
    // A forward continuing the cache: the FP32 FlashAttention-2 kernel over the float32 cache with
    // split keys, where the whole cache is one binding and one of its tilings fits.
    // Its two tilings come from softmaxCacheSpec, as the workspace's size does: one for short calls,
    // one for the others (the same where the short tiling does not fit).
    const AttentionConfig& c = attention.config();
    const std::optional<kernel::AttentionFlashFp32Spec> shortSpec = softmaxCacheSpec(caps, c, kCacheShortBlock, attention.tuningTable()),
                                                        longSpec = softmaxCacheSpec(caps, c, kCacheShortBlock + 1, attention.tuningTable());
    if (!flashFp32Requested()) {
        cacheUnsupported_ = "PSK_FP32_BASELINE=rows keeps the one-row kernel, which has no split keys";
    } else if (!longSpec) {
        std::string misfits;
        modelFlashFp32Spec(c, caps, nullptr, &misfits);
        cacheUnsupported_ = cat("no tiling of the FP32 FlashAttention-2 kernel fits (", misfits, ")");
    } else {
        auto pipeline = [&](const kernel::AttentionFlashFp32Spec& tiling, const char* why) {
            return kernelPipeline(context().pipelines(), KernelChoice::make<KernelId::AttentionFlashFp32>("softmax_cache", c.dataType, tiling, why));
        };
        cacheForward_ = pipeline(*longSpec, "a softmax forward continuing the KV cache: keys split across workgroups");
        cacheShort_ = pipeline(*shortSpec, "a softmax forward of a few rows continuing the KV cache: keys split across workgroups");
        kernel::AttentionCombineSpec combine;
        combine.WG = 64;
        combine.VALUE_DIM = dv_;
        combine_ = kernelPipeline(context().pipelines(),
                                  KernelChoice::make<KernelId::AttentionCombine>("", c.dataType, combine, "the split keys' merge"));
    }
    // The caches need no clearing: the key counts bound what is read. Counts start at zero.
    submitter_.run([&](Recorder& rec) { rec.fill({work_.handle(), 0, work_.size()}, work_.size(), 0); });
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
        recordKeyCounts(rec, info.firstSequence, std::vector<uint64_t>(count, n));
    });
}

void SoftmaxDecoder::recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>& positions) {
    // The slice length and the workgroups per slot follow the longest sequence (the host knows the
    // positions when it records); the keys of each sequence come from the device's counts.
    uint64_t longest = 0;
    for (uint32_t s = 0; s < batch_; ++s) longest = std::max(longest, positions[s] + 1);
    uint32_t slice = forcedSlice_;
    if (!slice) {
        const uint64_t even = ceilDiv(longest, uint64_t(splits_));
        slice = uint32_t(std::min<uint64_t>(maxSlice_, ceilDiv(std::max<uint64_t>(even, kDecodeWorkgroup), uint64_t(kDecodeWorkgroup)) *
                                                           kDecodeWorkgroup));
    }
    const uint32_t slots = batch_ * Hkv_;
    kernel::DecodeSoftmaxPush push{};
    push.q_heads = Hq_;
    push.kv_heads = Hkv_;
    push.batch = batch_;
    push.slice = slice;
    push.scale = attention_.config().scale;
    push.k_slot_stride = uint32_t(kSlot_);
    push.v_slot_stride = uint32_t(vSlot_);
    push.work = 0;
    push.group_stride = groupStride_;
    push.capacity = capacity_;
    push.dropped = uint32_t(droppedWord_);
    kernel::DecodeSoftmaxBindings b;
    b.WORKSPACE = BufferRange{work_.handle(), 0, work_.size()};
    b.Q_ROWS = t.q;
    b.K_ROWS = t.k;
    b.V_ROWS = t.v;
    b.OUT = t.out;
    if (wholeCache_) {
        push.groups = uint32_t(ceilDiv(longest, uint64_t(slice)));
        b.K_CACHE = BufferRange{kCache_.handle(), 0, kCache_.size()};
        b.V_CACHE = BufferRange{vCache_.handle(), 0, vCache_.size()};
        recordKernel(rec, step_, b, push, push.groups, slots);
    } else {
        // One dispatch per (sequence, kv head), binding that slot's caches only.
        for (uint32_t i = 0; i < slots; ++i) {
            push.groups = uint32_t(ceilDiv(positions[i / Hkv_] + 1, uint64_t(slice)));
            push.slot_base = push.cache_slot_base = i;
            b.K_CACHE = BufferRange{kCache_.handle(), i * kSlot_ * 4, kSlot_ * 4};
            b.V_CACHE = BufferRange{vCache_.handle(), i * vSlot_ * 4, vSlot_ * 4};
            recordKernel(rec, step_, b, push, push.groups, 1);
        }
    }
}

void SoftmaxDecoder::recordKeyCounts(Recorder& rec, uint32_t first, const std::vector<uint64_t>& positions) const {
    for (size_t i = 0; i < positions.size();) {  // one fill per run of equal counts
        size_t j = i + 1;
        while (j < positions.size() && positions[j] == positions[i]) ++j;
        const VkDeviceSize bytes = VkDeviceSize(j - i) * 4;
        rec.fill({work_.handle(), (first + i) * 4, bytes}, bytes, uint32_t(positions[i]));
        i = j;
    }
}

void SoftmaxDecoder::reset(uint32_t sequence) {
    submitter_.run([&](Recorder& rec) { recordKeyCounts(rec, sequence, {0}); });
}

std::vector<uint64_t> SoftmaxDecoder::devicePositions(const std::vector<uint64_t>& positions, uint64_t* dropped) {
    // The key counts are the positions; the refused tokens' word goes back to zero.
    const VkDeviceSize countBytes = VkDeviceSize(batch_) * 4;
    Buffer host = hostBuffer(countBytes + 4, MemoryUsage::HostReadback);
    const BufferRange counts{work_.handle(), 0, countBytes}, refused{work_.handle(), droppedWord_ * 4, 4};
    submitter_.run([&](Recorder& rec) {
        rec.copy(counts, {host.handle(), 0, countBytes}, countBytes);
        rec.copy(refused, {host.handle(), countBytes, 4}, 4);
        rec.fill(refused, 4, 0);
    });
    std::vector<uint32_t> words(batch_ + 1);
    std::memcpy(words.data(), host.mapped(), countBytes + 4);
    std::vector<uint64_t> out(positions.size());
    for (size_t s = 0; s < out.size(); ++s) out[s] = words[s];
    *dropped = words[batch_];
    return out;
}

void SoftmaxDecoder::restorePositions(const std::vector<uint64_t>& positions) {
    submitter_.run([&](Recorder& rec) { recordKeyCounts(rec, 0, positions); });
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
    if (position + n > capacity_)
        fail(PSK_ERROR_BUFFER_TOO_SMALL, "a call of ", n, " tokens at position ", position, " does not fit the KV cache (capacity ",
             capacity_, ")");
    if (position != 0 && !cacheUnsupported_.empty())
        fail(PSK_ERROR_UNSUPPORTED, "a SOFTMAX forward continuing a decode state at position ", position, " is not available here: ",
             cacheUnsupported_, " (continue with decode steps)");
}

uint32_t softmaxCacheSplits(const DeviceCaps& caps, const AttentionConfig& c, uint32_t batch, uint32_t n, uint32_t rows) {
    if (const char* forced = std::getenv("PSK_SOFTMAX_CACHE_SPLITS"))
        if (const int s = std::atoi(forced); s > 0) return uint32_t(std::min(s, 32));
    // Two workgroups per multiprocessor where the driver reports the count, else 264 on a GPU
    // (an H100's 132 SMs) and 8 on a CPU device (llvmpipe's few threads).
    const uint64_t target = caps.multiprocessorCount ? 2 * uint64_t(caps.multiprocessorCount)
                            : caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? 8
                                                                                        : 264;
    const uint64_t groups = uint64_t(ceilDiv(n, rows)) * c.numQueryHeads * batch;
    return uint32_t(std::clamp<uint64_t>(ceilDiv(target, groups), 1, 32));
}

std::optional<kernel::AttentionFlashFp32Spec> softmaxCacheSpec(const DeviceCaps& caps, const AttentionConfig& c, uint32_t n,
                                                               const TuningTable* tuning) {
    if (!flashFp32Requested()) return std::nullopt;
    if (n <= kCacheShortBlock)
        if (std::optional<kernel::AttentionFlashFp32Spec> small = shortBlockFlashFp32Spec(c, caps)) return small;
    // The model's first tiling sat at the 255-register cap on an H200 (579.6 ms for the 32k forward,
    // 4.7x the one-row kernel; the cache's calls run this kernel too): a measured one where the
    // table has it.
    if (std::optional<kernel::AttentionFlashFp32Spec> tuned = tunedFlashFp32Spec(c, caps, tuning)) return tuned;
    return modelFlashFp32Spec(c, caps);
}

uint64_t softmaxCacheForwardBytes(const DeviceCaps& caps, const AttentionConfig& c, uint32_t batch, uint32_t n, const TuningTable* tuning) {
    // splits x rows for m rows; the size is the largest over m <= n, so that it never decreases with
    // n (an app sizing the workspace for its longest call has enough for every shorter one). The
    // split count never rises with m and steps down only as m crosses a multiple of the workgroup's
    // rows, so the candidates are n, the short tiling's largest call, and the multiples below n
    // while the split count is above 1 (past that, splits x m = m < n).
    const std::optional<kernel::AttentionFlashFp32Spec> shortSpec = softmaxCacheSpec(caps, c, kCacheShortBlock, tuning),
                                                        longSpec = softmaxCacheSpec(caps, c, kCacheShortBlock + 1, tuning);
    if (!longSpec) return 0;
    auto splits = [&](uint32_t m) { return softmaxCacheSplits(caps, c, batch, m, (m <= kCacheShortBlock ? shortSpec : longSpec)->ROWS); };
    uint64_t most = uint64_t(splits(n)) * n;
    const uint32_t shortest = std::min(n, kCacheShortBlock);
    most = std::max(most, uint64_t(splits(shortest)) * shortest);
    for (uint32_t m = longSpec->ROWS; m < n && splits(m) > 1; m += longSpec->ROWS) most = std::max(most, uint64_t(splits(m)) * m);
    return most * batch * c.numQueryHeads * (c.valueDim + 2) * 4;
}

void SoftmaxDecoder::recordForward(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) {
    // Position 0: the forward over the call is the whole attention. The cache receives the call's
    // k and v rows (any strides) at rows position.. (where the whole cache is one binding, one
    // dispatch for all slots; else one (sequence, kv head) slot per dispatch, which binds that slot
    // only); past position 0 before the attention, which reads them there.
    if (position == 0)
        attention_.forward().record(rec, t);
    else
        rec.beginStage(PSK_FORWARD_STAGE_OUTPUT);  // one stage, as the forward: the cache rows and the attention
    const uint32_t count = t.geometry.batch, n = t.geometry.tokens;
    const uint64_t keys = position + n;
    const PskTensorStrides& ks = t.geometry.k.strides;
    const PskTensorStrides& vs = t.geometry.v.strides;
    if (wholeCache_) {
        // One dispatch each for K and V: every (sequence, kv head) of the call into its slot.
        const uint64_t slot0 = uint64_t(first) * Hkv_;
        const PskTensorStrides kSlots{Hkv_ * kSlot_, kSlot_, h_}, vSlots{Hkv_ * vSlot_, vSlot_, dv_};
        recordCopyRows(rec, {t.k, 0, ks}, {BufferRange{kCache_.handle(), 0, kCache_.size()}, slot0 * kSlot_ + position * h_, kSlots},
                       count, Hkv_, n, h_, RowConvert::ToF32);
        recordCopyRows(rec, {t.v, 0, vs}, {BufferRange{vCache_.handle(), 0, vCache_.size()}, slot0 * vSlot_ + position * dv_, vSlots},
                       count, Hkv_, n, dv_, RowConvert::ToF32);
        if (position != 0) recordCacheAttention(rec, t, first, position);
        recordKeyCounts(rec, first, std::vector<uint64_t>(count, keys));
        return;
    }
    const PskTensorStrides kDense = defaultStrides(PSK_LAYOUT_BHND, 1, n, h_), vDense = defaultStrides(PSK_LAYOUT_BHND, 1, n, dv_);
    for (uint32_t b = 0; b < count; ++b)
        for (uint32_t hd = 0; hd < Hkv_; ++hd) {
            const uint64_t slot = uint64_t(first + b) * Hkv_ + hd;
            recordCopyRows(rec, {t.k, b * ks.batch + hd * ks.head, ks}, {kRows(slot, keys), position * h_, kDense}, 1, 1, n, h_,
                           RowConvert::ToF32);
            recordCopyRows(rec, {t.v, b * vs.batch + hd * vs.head, vs}, {vRows(slot, keys), position * dv_, vDense}, 1, 1, n, dv_,
                           RowConvert::ToF32);
        }
    if (position != 0) recordCacheAttention(rec, t, first, position);
    recordKeyCounts(rec, first, std::vector<uint64_t>(count, keys));
}

void SoftmaxDecoder::recordCacheAttention(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) const {
    // The call's rows are key positions position.. of their sequences: row i sees keys 0 ..
    // position + i of the cache (which holds the call's own rows now). Keys split across
    // workgroups (z = sequence x split), each split's rows' (m, l, O) into the workspace in key
    // chunks of at most kBaselineKeysPerDispatch per dispatch (the state carried between them),
    // then attention_combine merges the splits into the output.
    const AttentionConfig& c = attention_.config();
    const uint32_t count = t.geometry.batch, n = t.geometry.tokens;
    const uint64_t keys = position + n;
    const std::optional<kernel::AttentionFlashFp32Spec> spec = softmaxCacheSpec(context().caps(), c, n, attention_.tuningTable());
    if (!spec) fail(PSK_ERROR_INTERNAL, "no tiling for a softmax forward continuing the cache");
    const KernelPipeline& pipeline = n <= kCacheShortBlock ? cacheShort_ : cacheForward_;  // made from the same specs
    const uint32_t rows = spec->ROWS;
    const uint32_t splits = softmaxCacheSplits(context().caps(), c, count, n, rows);
    const uint32_t splitKeys = uint32_t(ceilDiv(ceilDiv(keys, uint64_t(splits)), uint64_t(64)) * 64);
    const uint64_t stride = uint64_t(count) * Hq_ * n * (dv_ + 2);
    const VkPhysicalDeviceLimits& limits = context().caps().limits();
    const uint32_t groupsX = ceilDiv(n, rows);
    if (groupsX > limits.maxComputeWorkGroupCount[0] || uint64_t(count) * splits > limits.maxComputeWorkGroupCount[2])
        fail(PSK_ERROR_TOO_LARGE, "a softmax forward of ", n, " rows continuing the cache exceeds the device's dispatch limits");
    if (splits * stride >= (uint64_t(1) << 32) || splits * stride * 4 > limits.maxStorageBufferRange)
        fail(PSK_ERROR_TOO_LARGE, "a softmax forward of ", n, " rows continuing the cache needs ", splits * stride * 4,
             " bytes of split states, more than one storage-buffer binding holds; use fewer tokens or sequences per call");
    if (t.workspace[0].size < splits * stride * 4)
        fail(PSK_ERROR_INTERNAL, "the workspace lacks the split states of a softmax forward continuing the cache");
    kernel::AttentionTiledPush push{};
    push.n = n;
    push.head_ratio = Hq_ / Hkv_;
    push.scale = c.scale;
    push.num_q_heads = Hq_;
    push.q_pos = uint32_t(position);
    push.q_strides = kernel::pushStrides(t.geometry.q.strides);
    push.k_strides = {uint32_t(Hkv_ * kSlot_), uint32_t(kSlot_), h_};
    push.v_strides = {uint32_t(Hkv_ * vSlot_), uint32_t(vSlot_), dv_};
    push.o_strides = kernel::pushStrides(t.geometry.out.strides);
    push.splits = splits;
    push.split_keys = splitKeys;
    push.split_stride = uint32_t(stride);
    const uint64_t slot0 = uint64_t(first) * Hkv_, slots = uint64_t(count) * Hkv_;
    kernel::AttentionTiledBindings b;
    b.Q = t.q;
    b.OUT = kernel::unwritten(t.out);
    b.STATE = BufferRange{t.workspace[0].buffer, t.workspace[0].offset, splits * stride * 4};
    const uint32_t chunks = ceilDiv(splitKeys, kBaselineKeysPerDispatch);
    auto dispatchChunks = [&](uint32_t heads, uint32_t zBatches) {
        for (uint32_t chunk = 0; chunk < chunks; ++chunk) {
            push.key_begin = chunk * kBaselineKeysPerDispatch;
            push.key_limit = push.key_begin + kBaselineKeysPerDispatch;
            push.flags = (chunk > 0 ? kernel::FLAG_LOAD_STATE : 0) | kernel::FLAG_STORE_STATE;
            recordKernel(rec, pipeline, b, push, groupsX, heads, zBatches * splits);
        }
    };
    if (wholeCache_) {
        b.K = BufferRange{kCache_.handle(), slot0 * kSlot_ * 4, slots * kSlot_ * 4};
        b.V = BufferRange{vCache_.handle(), slot0 * vSlot_ * 4, slots * vSlot_ * 4};
        dispatchChunks(Hq_, count);
    } else {
        // The cache exceeds one binding: one (sequence, kv head) per dispatch, its slot alone bound
        // (row strides only), its query heads and batch entry from the push constants.
        push.k_strides = {0, 0, h_};
        push.v_strides = {0, 0, dv_};
        const uint32_t ratio = Hq_ / Hkv_;
        for (uint32_t bi = 0; bi < count; ++bi)
            for (uint32_t hd = 0; hd < Hkv_; ++hd) {
                const uint64_t slot = slot0 + uint64_t(bi) * Hkv_ + hd;
                push.batch_base = bi;
                push.q_head_base = hd * ratio;
                b.K = BufferRange{kCache_.handle(), slot * kSlot_ * 4, kSlot_ * 4};
                b.V = BufferRange{vCache_.handle(), slot * vSlot_ * 4, vSlot_ * 4};
                dispatchChunks(ratio, 1);
            }
    }
    kernel::AttentionCombinePush cp{};
    cp.rows = count * Hq_ * n;
    cp.n = n;
    cp.num_q_heads = Hq_;
    cp.splits = splits;
    cp.split_stride = uint32_t(stride);
    const uint64_t groups = ceilDiv(uint64_t(cp.rows) * dv_, uint64_t(64));
    cp.groups_x = uint32_t(std::min<uint64_t>(groups, limits.maxComputeWorkGroupCount[0]));
    const uint64_t groupsY = ceilDiv(groups, uint64_t(cp.groups_x));
    if (groupsY > limits.maxComputeWorkGroupCount[1])
        fail(PSK_ERROR_TOO_LARGE, "a softmax forward of ", n, " rows continuing the cache exceeds the device's dispatch limits");
    cp.o_strides = kernel::pushStrides(t.geometry.out.strides);
    kernel::AttentionCombineBindings cb;
    cb.STATE = b.STATE;
    cb.OUT = t.out;
    recordKernel(rec, combine_, cb, cp, cp.groups_x, uint32_t(groupsY), 1);
}

}  // namespace psk
