// The parts of psk::Decoder (decoder.hpp) both kinds share: buffers, binding limits, row copies, the
// prompt's forward call and host rows.
#include "decode/decoder.hpp"
#include "decode/softmax_decoder.hpp"
#include "kernels/kernel_pipeline.hpp"

#include <algorithm>
#include <cstring>

#include "decode/polysketch_decoder.hpp"
#include "forward/attention.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "util/float16.hpp"
#include "util/sizes.hpp"
#include "util/storage_type.hpp"
#include "vk/context.hpp"

namespace psk {

Decoder::Decoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape)
    : attention_(attention),
      submitter_(submitter),
      batch_(shape.batch),
      Hq_(shape.Hq),
      Hkv_(shape.Hkv),
      h_(shape.h),
      dv_(shape.dv) {
    kernel::CopyRowsSpec spec;
    spec.WG = kDecodeWorkgroup;
    const PskDataType type = attention.config().dataType;
    copyRows_ = kernelPipeline(context().pipelines(), KernelChoice::make(KernelId::CopyRows, "", type, spec,
                                                             "state passing: rows between strided tensors"));
    eb_ = psk::elementBytes(type);
    if (type != PSK_DATA_TYPE_FLOAT32) {
        toF32_ = kernelPipeline(context().pipelines(), KernelChoice::make(KernelId::CopyRowsConvert, "to_f32", type, spec,
                                                              "16-bit decoding: storage type to the float32 state"));
        fromF32_ = kernelPipeline(context().pipelines(), KernelChoice::make(KernelId::CopyRowsConvert, "from_f32", type, spec,
                                                                "16-bit decoding: float32 rows to the storage type"));
    }
}

PskContext_T& Decoder::context() const { return *attention_.context(); }

Buffer Decoder::deviceBuffer(VkDeviceSize bytes) const { return decodeDeviceBuffer(context().allocator(), bytes); }

Buffer Decoder::hostBuffer(VkDeviceSize bytes, MemoryUsage usage) const {
    return decodeHostBuffer(context().allocator(), bytes, usage);
}

void Decoder::checkBindingRange(const char* what, uint64_t floats) const {
    const VkPhysicalDeviceLimits& limits = context().caps().limits();
    if (floats >= (uint64_t(1) << 32) || floats * 4 > limits.maxStorageBufferRange)
        fail(PSK_ERROR_TOO_LARGE, "the decode state's ", what, " needs ", floats * 4,
             " bytes, more than one storage buffer binding can address (", limits.maxStorageBufferRange, ")");
}

void Decoder::recordCopyRows(Recorder& rec, const RowTensor& src, const RowTensor& dst, uint32_t batch, uint32_t heads,
                             uint32_t rows, uint32_t dim, RowConvert convert) const {
    if (!rows || !dim || !batch || !heads) return;
    const VkPhysicalDeviceLimits& limits = context().caps().limits();
    const uint64_t groups = ceilDiv(uint64_t(rows) * dim, kDecodeWorkgroup);
    const uint32_t groupsX = uint32_t(std::min<uint64_t>(groups, limits.maxComputeWorkGroupCount[0]));
    const uint64_t groupsY = ceilDiv(groups, uint64_t(groupsX));
    if (groupsY > limits.maxComputeWorkGroupCount[1] || heads > limits.maxComputeWorkGroupCount[2])
        fail(PSK_ERROR_TOO_LARGE, "a row copy of ", rows, " rows exceeds the device's dispatch limits");
    kernel::CopyRowsPush push{};
    push.dim = dim;
    push.rows = rows;
    push.heads = heads;
    push.groups_x = groupsX;
    push.src_base = uint32_t(src.base);
    push.src = kernel::pushStrides(src.strides);
    push.dst_base = uint32_t(dst.base);
    push.dst = kernel::pushStrides(dst.strides);
    // Batch entries per dispatch: as many as the z dimension allows.
    const uint32_t perDispatch = std::max<uint32_t>(1, std::min<uint32_t>(batch, limits.maxComputeWorkGroupCount[2] / heads));
    const VkPipeline pipeline = convert == RowConvert::ToF32 && toF32_     ? toF32_
                                : convert == RowConvert::FromF32 && fromF32_ ? fromF32_
                                                                           : copyRows_;
    for (uint32_t b0 = 0; b0 < batch; b0 += perDispatch) {
        push.batch_base = b0;
        rec.dispatch(pipeline, {reads(src.binding), writes(dst.binding)}, &push, sizeof(push), groupsX, uint32_t(groupsY),
                     std::min(perDispatch, batch - b0) * heads);
    }
}

WorkspaceLayout stateForwardWorkspaceLayout(const PskAttention_T& attention, const ForwardGeometry& g) {
    const AttentionConfig& c = attention.config();
    if (!c.causal || (c.kind != PSK_ATTENTION_KIND_POLYSKETCH && c.kind != PSK_ATTENTION_KIND_SOFTMAX))
        fail(PSK_ERROR_UNSUPPORTED, "a forward with a decode state needs a CAUSAL POLYSKETCH or SOFTMAX attention");
    if (c.kind == PSK_ATTENTION_KIND_SOFTMAX) {
        // The forward's key-chunk state at position 0, the split states later (the larger of the two).
        WorkspaceLayout L = attention.workspaceLayout(g);
        const uint64_t splitStates = softmaxCacheForwardBytes(attention.context()->caps(), c, g.batch, g.tokens, attention.tuningTable());
        if (L.regions.empty()) {
            if (splitStates) L.regions.push_back({"split-key states", splitStates});
        } else {
            L.regions[0].size = std::max<VkDeviceSize>(L.regions[0].size, splitStates);
        }
        return L;
    }
    return polysketchStateForwardWorkspaceLayout(attention, g);
}

VkDeviceSize stateForwardWorkspaceBytes(const PskAttention_T& attention, const ForwardGeometry& g) {
    return stateForwardWorkspaceLayout(attention, g).contiguousBytes();
}

Buffer decodeDeviceBuffer(Allocator& allocator, VkDeviceSize bytes) {
    const VkBufferUsageFlags flags = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    return Buffer(allocator, std::max<VkDeviceSize>(bytes, 16), flags, MemoryUsage::DeviceLocal);
}

Buffer decodeHostBuffer(Allocator& allocator, VkDeviceSize bytes, MemoryUsage usage) {
    const VkBufferUsageFlags flags = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    Buffer buffer(allocator, std::max<VkDeviceSize>(bytes, 16), flags, usage);
    if (!buffer.mapped()) fail(PSK_ERROR_INTERNAL, "host-visible buffer is not mapped");
    return buffer;
}

PskForwardHostInfo promptForwardInfo(const PskDecodePrefillInfo& info, uint32_t count) {
    PskForwardHostInfo fwd{};
    fwd.batchSize = count;
    fwd.seqLen = info.seqLen;
    fwd.q = info.q;
    fwd.k = info.k;
    fwd.v = info.v;
    fwd.out = info.out;
    fwd.qBytes = info.qBytes;
    fwd.kBytes = info.kBytes;
    fwd.vBytes = info.vBytes;
    fwd.outBytes = info.outBytes;
    return fwd;
}

std::vector<float> gatherRows(const void* data, const PskTensorStrides& s, uint32_t batch, uint32_t heads, uint32_t t0,
                              uint32_t rows, uint32_t dim, PskDataType type) {
    std::vector<float> out(size_t(batch) * heads * rows * dim);
    size_t o = 0;
    for (uint32_t b = 0; b < batch; ++b)
        for (uint32_t hd = 0; hd < heads; ++hd)
            for (uint32_t t = t0; t < t0 + rows; ++t, o += dim) {
                const uint64_t at = b * uint64_t(s.batch) + hd * uint64_t(s.head) + uint64_t(t) * s.token;
                if (type == PSK_DATA_TYPE_FLOAT32) {
                    std::memcpy(&out[o], static_cast<const float*>(data) + at, dim * sizeof(float));
                } else {
                    const uint16_t* src = static_cast<const uint16_t*>(data) + at;
                    for (uint32_t d = 0; d < dim; ++d)
                        out[o + d] = type == PSK_DATA_TYPE_FLOAT16 ? halfToFloat(src[d]) : bf16ToFloat(src[d]);
                }
            }
    return out;
}

}  // namespace psk
