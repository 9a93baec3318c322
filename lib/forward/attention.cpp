#include "forward/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "forward/coopmat_self_test.hpp"
#include "forward/coopmat_switches.hpp"
#include "util/error.hpp"

using namespace psk;

namespace {

/** Calls fn(elementOffset) for the first element of every row (b, h, t) of a tensor. */
template <typename Fn>
void forEachRow(const TensorGeometry& t, Fn&& fn) {
    for (uint32_t b = 0; b < t.batch; ++b)
        for (uint32_t h = 0; h < t.heads; ++h)
            for (uint32_t i = 0; i < t.tokens; ++i) fn(b * t.strides.batch + h * t.strides.head + i * t.strides.token);
}

/** Throws NON_FINITE_INPUT when any element of the tensor is NaN or infinite. */
void checkFinite(const char* name, const void* data, const TensorGeometry& t, PskDataType type) {
    bool finite = true;
    forEachRow(t, [&](uint64_t row) {
        if (!finite) return;
        if (type == PSK_DATA_TYPE_FLOAT32) {
            const float* p = static_cast<const float*>(data) + row;
            for (uint32_t d = 0; d < t.dim; ++d) finite &= std::isfinite(p[d]);
        } else {
            // All exponent bits set means infinity or NaN in both 16-bit formats.
            const uint16_t mask = type == PSK_DATA_TYPE_FLOAT16 ? 0x7C00 : 0x7F80;
            const uint16_t* p = static_cast<const uint16_t*>(data) + row;
            for (uint32_t d = 0; d < t.dim; ++d) finite &= (p[d] & mask) != mask;
        }
    });
    if (!finite) fail(PSK_ERROR_NON_FINITE_INPUT, name, " contains NaN or infinity");
}

}  // namespace

PskAttention_T::PskAttention_T(PskContext context, const PskAttentionCreateInfo& info)
    : PskAttention_T(context, info, kCoopAllStages, false) {}

PskAttention_T::PskAttention_T(PskContext context, const PskAttentionCreateInfo& info, uint32_t coopStages, bool selfTestProbe,
                               AttentionConfig::ProbeWalk probeWalk)
    : context_(context), tuning_(context->tuningSelection()) {
    ResolvedAttention resolved = resolveAttention(info, context->caps());
    config_ = resolved.config;
    sketch_ = std::move(resolved.sketch);
    config_.coopStages = coopStages;
    config_.selfTestProbe = selfTestProbe;
    config_.probeWalk = probeWalk;

    // Pipelines are created here, not on the first call, so that a call never stalls on a compile.
    forward_ = createForwardKind(context, config_, sketch_, tuning_);
    // A cooperative kernel is checked against the generic one before its first use on a device;
    // the stages whose kernel disagrees are planned again without it.
    if (const uint32_t failed = coopSelfTest(context, info, config_, forward_->kernels()) & config_.coopStages) {
        config_.coopStages &= ~failed;
        forward_.reset();
        forward_ = createForwardKind(context, config_, sketch_, tuning_);
    }
    polysketch_ = dynamic_cast<const PolysketchForward*>(forward_.get());

    submitter_ = std::make_unique<Submitter>(*context);
}

// Members release themselves: the submission objects (every host call waited for its own), the
// arena of pskCmdAttentionForward, the cached tensors, the pipelines.
PskAttention_T::~PskAttention_T() = default;

VkDeviceSize PskAttention_T::workspaceBytes(const ForwardGeometry& g) const { return forward_->workspaceBytes(g); }

WorkspacePacking PskAttention_T::hostPacking(const WorkspaceLayout& layout) const {
    // The allocator rounds a buffer up to its memory alignment, which the cap must still hold:
    // packing under the cap rounded down to 64 KiB (above every alignment drivers report) keeps
    // each buffer's allocation within it.
    VkDeviceSize cap = context_->maxAllocationSize();
    const VkDeviceSize granule = VkDeviceSize(64) << 10;
    if (cap > granule) cap = cap / granule * granule;
    return packWorkspace(layout, cap, "the context's largest allocation (maxAllocationSize, else maxMemoryAllocationSize)");
}

namespace {

/** The geometry of tokens [begin, begin + count) of a batch-1 geometry (same strides). */
ForwardGeometry sequenceGeometry(const ForwardGeometry& g, uint32_t count) {
    ForwardGeometry s = g;
    s.batch = 1;
    s.tokens = count;
    for (TensorGeometry* t : {&s.q, &s.k, &s.v, &s.out}) {
        t->batch = 1;
        t->tokens = count;
    }
    return s;
}

}  // namespace

WorkspaceLayout PskAttention_T::checkVarlen(const ForwardGeometry& g, const uint32_t* cu, uint32_t sequences) const {
    if (cu[0] != 0) fail(PSK_ERROR_INVALID_ARGUMENT, "info->cuSeqlens[0] is ", cu[0], "; it must be 0");
    for (uint32_t i = 0; i < sequences; ++i)
        if (cu[i + 1] < cu[i])
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->cuSeqlens decreases: cuSeqlens[", i + 1, "] = ", cu[i + 1], " < cuSeqlens[", i,
                 "] = ", cu[i]);
    if (cu[sequences] != g.tokens)
        fail(PSK_ERROR_INVALID_SHAPE, "info->cuSeqlens[", sequences, "] (batchSize) is ", cu[sequences],
             "; it must equal seqLen (the total tokens, ", g.tokens, ")");
    const VkDeviceSize align = std::max<VkDeviceSize>(context_->caps().limits().minStorageBufferOffsetAlignment, 1);
    const size_t eb = elementBytes(config_.dataType);
    // Every sequence shares one set of regions: region by region the largest sequence's need.
    WorkspaceLayout workspace;
    for (uint32_t i = 0; i < sequences; ++i) {
        if (cu[i + 1] == cu[i]) continue;
        const struct {
            const char* name;
            const TensorGeometry& t;
        } tensors[] = {{"q", g.q}, {"k", g.k}, {"v", g.v}, {"out", g.out}};
        for (const auto& x : tensors) {
            const uint64_t offset = uint64_t(cu[i]) * x.t.strides.token * eb;
            if (offset % align)
                fail(PSK_ERROR_UNSUPPORTED, "sequence ", i, " starts at byte ", offset, " of ", x.name,
                     ", not a multiple of the device's minStorageBufferOffsetAlignment (", align,
                     "): cuSeqlens needs token strides whose byte offsets are aligned");
        }
        workspace = WorkspaceLayout::max(workspace, forward_->workspaceLayout(sequenceGeometry(g, cu[i + 1] - cu[i])));
    }
    return workspace;
}

void PskAttention_T::recordVarlen(Recorder& rec, const BoundTensors& t, const uint32_t* cu, uint32_t sequences) const {
    const size_t eb = elementBytes(config_.dataType);
    for (uint32_t i = 0; i < sequences; ++i) {
        const uint32_t count = cu[i + 1] - cu[i];
        if (!count) continue;
        const ForwardGeometry s = sequenceGeometry(t.geometry, count);
        auto range = [&](const BufferRange& r, const TensorGeometry& whole, const TensorGeometry& part) {
            return BufferRange{r.buffer, r.offset + uint64_t(cu[i]) * whole.strides.token * eb, part.extentElements() * eb};
        };
        // The regions were bound for the largest sequence; a shorter one uses the start of each.
        forward_->record(rec, BoundTensors{range(t.q, t.geometry.q, s.q), range(t.k, t.geometry.k, s.k),
                                           range(t.v, t.geometry.v, s.v), range(t.out, t.geometry.out, s.out), s, t.workspace});
    }
}

void PskAttention_T::ensureBuffer(Buffer& buffer, VkDeviceSize bytes, MemoryUsage usage) {
    if (buffer && buffer.size() >= bytes) return;
    buffer.reset();  // release first, so the peak is not old + new
    const VkBufferUsageFlags flags = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    buffer = Buffer(context_->allocator(), bytes, flags, usage);
}

void PskAttention_T::forwardHost(const PskForwardHostInfo& info, const RecordAfterForward& after, const Override* override) {
    const struct {
        const char* name;
        const void* pointer;
    } arrays[] = {{"q", info.q}, {"k", info.k}, {"v", info.v}, {"out", info.out}};
    for (const auto& a : arrays)
        if (!a.pointer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->", a.name, " must not be NULL");
    const DeviceCaps& caps = context_->caps();
    // Variable-length packed batch: the tensors are those of batch 1 with the total tokens.
    const uint32_t sequences = info.batchSize ? info.batchSize : 1;
    const ForwardGeometry g = makeForwardGeometry(config_, caps, info.cuSeqlens ? 1 : info.batchSize, info.seqLen, info.qStrides,
                                                  info.kStrides, info.vStrides, info.outStrides);
    const WorkspaceLayout varlenWorkspace = info.cuSeqlens ? checkVarlen(g, info.cuSeqlens, sequences) : WorkspaceLayout{};
    const size_t eb = elementBytes(config_.dataType);
    const VkDeviceSize qBytes = g.q.extentElements() * eb, kBytes = g.k.extentElements() * eb,
                       vBytes = g.v.extentElements() * eb, oBytes = g.out.extentElements() * eb;
    const struct {
        const char* name;
        size_t given;
        VkDeviceSize needed;
    } sizes[] = {{"q", info.qBytes, qBytes}, {"k", info.kBytes, kBytes}, {"v", info.vBytes, vBytes}, {"out", info.outBytes, oBytes}};
    for (const auto& s : sizes)
        if (s.given < s.needed) fail(PSK_ERROR_BUFFER_TOO_SMALL, s.name, " holds ", s.given, " bytes; the shape needs ", s.needed);
    checkFinite("q", info.q, g.q, config_.dataType);
    checkFinite("k", info.k, g.k, config_.dataType);
    checkFinite("v", info.v, g.v, config_.dataType);

    const WorkspaceLayout layout =
        override ? override->workspaceLayout(g) : info.cuSeqlens ? varlenWorkspace : forward_->workspaceLayout(g);
    const VkDeviceSize workspaceBytes = layout.contiguousBytes();
    // Split where one allocation cannot hold it; a region too large alone fails here, before
    // anything is allocated or written.
    const WorkspacePacking packing = hostPacking(layout);
    bool direct = false;
    try {
        ensureBuffer(q_, qBytes, MemoryUsage::DeviceLocal);
        ensureBuffer(k_, kBytes, MemoryUsage::DeviceLocal);
        ensureBuffer(v_, vBytes, MemoryUsage::DeviceLocal);
        ensureBuffer(out_, oBytes, MemoryUsage::DeviceLocal);
        if (workspaces_.size() < packing.bufferBytes.size()) workspaces_.resize(packing.bufferBytes.size());
        for (size_t i = 0; i < packing.bufferBytes.size(); ++i)
            ensureBuffer(workspaces_[i], packing.bufferBytes[i], MemoryUsage::DeviceLocal);
        // Unified memory (integrated GPUs, lavapipe): write and read the tensors in place.
        direct = q_.mapped() && k_.mapped() && v_.mapped() && out_.mapped();
        if (!direct) {
            ensureBuffer(upload_, qBytes + kBytes + vBytes, MemoryUsage::HostUpload);
            ensureBuffer(readback_, oBytes, MemoryUsage::HostReadback);
        }
    } catch (...) {
        // Out of device memory (or TOO_LARGE) part way: give back what this call grew, and the
        // rest of the cache, so a failed call leaves the device memory as a fresh object holds it.
        releaseCachedTensors();
        throw;
    }
    uint8_t* uploadBase = direct ? nullptr : upload_.mapped();
    std::memcpy(direct ? q_.mapped() : uploadBase, info.q, qBytes);
    std::memcpy(direct ? k_.mapped() : uploadBase + qBytes, info.k, kBytes);
    std::memcpy(direct ? v_.mapped() : uploadBase + qBytes + kBytes, info.v, vBytes);

    std::vector<BufferRange> workspaceBuffers;
    for (size_t i = 0; i < packing.bufferBytes.size(); ++i) workspaceBuffers.push_back({workspaces_[i].handle(), 0, packing.bufferBytes[i]});
    const BoundTensors tensors{{q_.handle(), 0, qBytes}, {k_.handle(), 0, kBytes}, {v_.handle(), 0, vBytes}, {out_.handle(), 0, oBytes}, g,
                               bindWorkspace(layout, packing, workspaceBuffers)};
    double gpuMs = 0.0, stageMs[Submitter::kMaxStages] = {};
    static_assert(Submitter::kMaxStages == PSK_FORWARD_STAGE_COUNT, "one timestamp per PskForwardStage");
    submitter_->run(
        [&](Recorder& rec) {
            if (!direct) {
                rec.copy({upload_.handle(), 0, qBytes}, tensors.q, qBytes);
                rec.copy({upload_.handle(), qBytes, kBytes}, tensors.k, kBytes);
                rec.copy({upload_.handle(), qBytes + kBytes, vBytes}, tensors.v, vBytes);
            }
            // PskForwardStats.gpuMilliseconds is the attention's dispatches alone: not the copies
            // around them, nor what `after` records.
            submitter_->startTiming();
            if (override)
                override->record(rec, tensors);
            else if (info.cuSeqlens)
                recordVarlen(rec, tensors, info.cuSeqlens, sequences);
            else
                forward_->record(rec, tensors);
            submitter_->stopTiming();
            if (after) after(rec, tensors);
            if (!direct) rec.copy(tensors.out, {readback_.handle(), 0, oBytes}, oBytes);
        },
        info.stats ? &gpuMs : nullptr, info.stats ? stageMs : nullptr);

    // Copy out row by row: the caller's array may have gaps (custom strides) that stay untouched.
    const uint8_t* src = direct ? out_.mapped() : readback_.mapped();
    uint8_t* dst = static_cast<uint8_t*>(info.out);
    const size_t rowBytes = size_t(g.out.dim) * eb;
    forEachRow(g.out, [&](uint64_t row) { std::memcpy(dst + row * eb, src + row * eb, rowBytes); });
    lastWorkspaceBuffers_ = packing.bufferBytes.size();
    if (info.stats) {
        info.stats->gpuMilliseconds = gpuMs;
        info.stats->workspaceBytes = workspaceBytes;
        for (uint32_t i = 0; i < PSK_FORWARD_STAGE_COUNT; ++i) info.stats->stageMilliseconds[i] = stageMs[i];
    }
}

void PskAttention_T::releaseCachedTensors() {
    for (Buffer* b : {&q_, &k_, &v_, &out_, &upload_, &readback_}) b->reset();
    workspaces_.clear();
}

void PskAttention_T::cmdForward(VkCommandBuffer commandBuffer, const PskCmdForwardInfo& info, const Override* override) {
    if (!commandBuffer) fail(PSK_ERROR_INVALID_ARGUMENT, "commandBuffer must not be VK_NULL_HANDLE");
    const struct {
        const char* name;
        const PskVulkanTensor& t;
    } tensors[] = {{"q", info.q}, {"k", info.k}, {"v", info.v}, {"out", info.out}};
    for (const auto& x : tensors)
        if (!x.t.buffer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->", x.name, ".buffer must not be VK_NULL_HANDLE");
    const DeviceCaps& caps = context_->caps();
    const uint32_t sequences = info.batchSize ? info.batchSize : 1;
    const ForwardGeometry g = makeForwardGeometry(config_, caps, info.cuSeqlens ? 1 : info.batchSize, info.seqLen, info.q.strides,
                                                  info.k.strides, info.v.strides, info.out.strides);
    const WorkspaceLayout varlenWorkspace = info.cuSeqlens ? checkVarlen(g, info.cuSeqlens, sequences) : WorkspaceLayout{};
    const VkDeviceSize align = std::max<VkDeviceSize>(caps.limits().minStorageBufferOffsetAlignment, 1);
    const size_t eb = elementBytes(config_.dataType);
    const VkDeviceSize needed[4] = {g.q.extentElements() * eb, g.k.extentElements() * eb, g.v.extentElements() * eb,
                                    g.out.extentElements() * eb};
    for (int i = 0; i < 4; ++i) {
        const auto& x = tensors[i];
        if (x.t.offset % align)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->", x.name, ".offset ", x.t.offset,
                 " is not a multiple of the device's minStorageBufferOffsetAlignment (", align, ")");
        if (x.t.size < needed[i])
            fail(PSK_ERROR_BUFFER_TOO_SMALL, "info->", x.name, ".size is ", x.t.size, " bytes; the shape and strides need ", needed[i]);
    }
    const WorkspaceLayout layout =
        override ? override->workspaceLayout(g) : info.cuSeqlens ? varlenWorkspace : forward_->workspaceLayout(g);
    const VkDeviceSize workspaceBytes = layout.contiguousBytes();
    const char* sizeFunction = override ? "pskGetStateWorkspaceSize" : "pskGetWorkspaceSize";
    BoundWorkspace workspace;
    if (info.workspaceCount) {
        // Several buffers: each range checked, then the regions placed into them in order.
        if (!info.pWorkspaces)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->pWorkspaces must not be NULL when info->workspaceCount is ", info.workspaceCount);
        if (info.workspace)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->workspace must be VK_NULL_HANDLE when info->workspaceCount is non-zero "
                 "(the workspace is then info->pWorkspaces)");
        std::vector<VkDeviceSize> sizes;
        std::vector<BufferRange> buffers;
        for (uint32_t i = 0; i < info.workspaceCount; ++i) {
            const PskWorkspaceRange& r = info.pWorkspaces[i];
            if (!r.buffer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->pWorkspaces[", i, "].buffer must not be VK_NULL_HANDLE");
            if (r.offset % align)
                fail(PSK_ERROR_INVALID_ARGUMENT, "info->pWorkspaces[", i, "].offset ", r.offset,
                     " is not a multiple of the device's minStorageBufferOffsetAlignment (", align, ")");
            sizes.push_back(r.size);
            buffers.push_back({r.buffer, r.offset, r.size});
        }
        const WorkspacePacking packing = placeWorkspace(layout, sizes, "info->pWorkspaces",
                                                        override ? "pskGetWorkspaceLayout with withDecodeState" : "pskGetWorkspaceLayout");
        workspace = bindWorkspace(layout, packing, buffers);
    } else if (workspaceBytes) {
        if (!info.workspace)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->workspace must not be VK_NULL_HANDLE: this call needs ", workspaceBytes,
                 " bytes of workspace (", sizeFunction, ")");
        if (info.workspaceOffset % align)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->workspaceOffset ", info.workspaceOffset,
                 " is not a multiple of the device's minStorageBufferOffsetAlignment (", align, ")");
        if (info.workspaceSize < workspaceBytes)
            fail(PSK_ERROR_BUFFER_TOO_SMALL, "info->workspaceSize is ", info.workspaceSize, " bytes; this call needs ",
                 workspaceBytes, " (", sizeFunction, ")");
        workspace = bindContiguous(layout, {info.workspace, info.workspaceOffset, workspaceBytes});
    } else {
        workspace = bindContiguous(layout, {});
    }

    if (!context_->pipelines().usesPushDescriptors() && !commandDescriptors_)
        commandDescriptors_ = std::make_unique<DescriptorArena>(context_->vk(), context_->device());
    if (override && override->orderAfterEarlierWork) {
        VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        barrier.dstAccessMask =
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        context_->vk().vkCmdPipelineBarrier(commandBuffer, stages, stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
    }
    Recorder rec(context_->vk(), commandBuffer, context_->pipelines(), commandDescriptors_.get());
    const BoundTensors bound{{info.q.buffer, info.q.offset, needed[0]},
                             {info.k.buffer, info.k.offset, needed[1]},
                             {info.v.buffer, info.v.offset, needed[2]},
                             {info.out.buffer, info.out.offset, needed[3]},
                             g,
                             workspace};
    if (override)
        override->record(rec, bound);
    else if (info.cuSeqlens)
        recordVarlen(rec, bound, info.cuSeqlens, sequences);
    else
        forward_->record(rec, bound);
}

void PskAttention_T::resetCommandDescriptors() {
    if (commandDescriptors_) commandDescriptors_->reset();
}
