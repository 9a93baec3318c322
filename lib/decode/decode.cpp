// Incremental decoding (docs/MATH.md section 7). See decode.hpp and docs/DECODING.md.
//
// Polysketch step, one command buffer:
//   1. the forward's feature map (sketch_features.comp, the forward's own pipeline and push
//      constants) over the one new token per sequence: S(q), S(k) and, in local-exact mode, the
//      local rows q', k' (the forward's block states, scan and output are not run);
//   2. sketched local: decode_fold adds phi(k)[v | 1] of the new token to z;
//      local exact:    the new token's S(k), k', v rows are copied into the unfinished block;
//   3. decode_output: phi(q)^T z (+ the exact local part over the unfinished block);
//   4. local exact, sequences whose block just completed: decode_fold moves the block into z.
// Prefill runs the attention's own causal forward over the prompt and, in the same command buffer
// after it, moves what the state needs out of that call's workspace: Z_{t-1} (the exclusive
// prefix of the block states, block_scan.comp) and the last block's S(k) / k' rows, so the state
// is Z_{t-1} plus the last block (folded, or kept as rows when it is unfinished in local-exact
// mode). Nothing is read from the workspace after the call returns.
// Softmax step: the new k, v rows are copied into the cache, then decode_softmax's two passes.
#include "decode/decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "vk/context.hpp"
#include "util/error.hpp"
#include "forward/polysketch_forward.hpp"
#include "util/sizes.hpp"

using namespace psk;

namespace {

constexpr uint32_t kWorkgroup = 64;
constexpr uint32_t kFormatVersion = 2;  // 2: local exact keeps the running block sum h, not S(k) rows
constexpr char kMagic[8] = {'P', 'S', 'K', 'D', 'E', 'C', 'S', 'T'};
constexpr size_t kHeaderBytes = 8 + 4 + 11 * 4 + 8 + 2 * 4;
constexpr uint32_t kMaxCapacity = 1u << 24;

using FoldPush = kernel::DecodeFoldPush;
using OutputPush = kernel::DecodeOutputPush;
using SoftmaxPush = kernel::DecodeSoftmaxPush;


void checkFiniteFloats(const char* name, const void* data, size_t count) {
    const float* p = static_cast<const float*>(data);
    for (size_t i = 0; i < count; ++i)
        if (!std::isfinite(p[i])) fail(PSK_ERROR_NON_FINITE_INPUT, name, " contains NaN or infinity");
}

/** Copies rows [t0, t0 + rows) of every (b, head) of a strided host tensor into dense [b][head][rows][dim]. */
std::vector<float> gatherRows(const void* data, const PskTensorStrides& s, uint32_t batch, uint32_t heads, uint32_t t0,
                              uint32_t rows, uint32_t dim) {
    std::vector<float> out(size_t(batch) * heads * rows * dim);
    const float* src = static_cast<const float*>(data);
    size_t o = 0;
    for (uint32_t b = 0; b < batch; ++b)
        for (uint32_t hd = 0; hd < heads; ++hd)
            for (uint32_t t = t0; t < t0 + rows; ++t, o += dim)
                std::memcpy(&out[o], src + b * s.batch + hd * s.head + uint64_t(t) * s.token, dim * sizeof(float));
    return out;
}

/** Tokens [t0, t0 + rows) of every (b, head) of a host tensor, as a dense tensor of `rows` tokens in `layout`. */
std::vector<float> gatherTokens(const void* data, const PskTensorStrides& s, uint32_t batch, uint32_t heads, uint32_t t0, uint32_t rows,
                                uint32_t dim, PskLayout layout) {
    const PskTensorStrides d = defaultStrides(layout, heads, rows, dim);
    std::vector<float> out(size_t(batch) * heads * rows * dim);
    const float* src = static_cast<const float*>(data);
    for (uint32_t b = 0; b < batch; ++b)
        for (uint32_t hd = 0; hd < heads; ++hd)
            for (uint32_t t = 0; t < rows; ++t)
                std::memcpy(&out[b * d.batch + hd * d.head + uint64_t(t) * d.token],
                            src + b * s.batch + hd * s.head + uint64_t(t0 + t) * s.token, dim * sizeof(float));
    return out;
}

void put32(std::vector<uint8_t>& out, uint32_t x) {
    for (int i = 0; i < 4; ++i) out.push_back(uint8_t(x >> (8 * i)));
}
void put64(std::vector<uint8_t>& out, uint64_t x) {
    for (int i = 0; i < 8; ++i) out.push_back(uint8_t(x >> (8 * i)));
}
uint32_t get32(const uint8_t* p) {
    uint32_t x = 0;
    for (int i = 0; i < 4; ++i) x |= uint32_t(p[i]) << (8 * i);
    return x;
}
uint64_t get64(const uint8_t* p) {
    uint64_t x = 0;
    for (int i = 0; i < 8; ++i) x |= uint64_t(p[i]) << (8 * i);
    return x;
}

struct Fnv {
    uint64_t h = 1469598103934665603ull;
    void bytes(const void* data, size_t n) {
        const uint8_t* p = static_cast<const uint8_t*>(data);
        for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    }
    void u32(uint32_t x) { bytes(&x, 4); }
};

}  // namespace

PskDecodeState_T::PskDecodeState_T(PskAttention attention, const PskDecodeStateCreateInfo& info)
    : attention_(attention), kind_(attention->config().kind) {
    const AttentionConfig& c = attention->config();
    const DeviceCaps& caps = context()->caps();
    const VkPhysicalDeviceLimits& limits = caps.limits();
    if (kind_ != PSK_ATTENTION_KIND_POLYSKETCH && kind_ != PSK_ATTENTION_KIND_SOFTMAX)
        fail(PSK_ERROR_UNSUPPORTED, "incremental decoding supports POLYSKETCH and SOFTMAX attention, not POLYNOMIAL");
    if (!c.causal) fail(PSK_ERROR_UNSUPPORTED, "incremental decoding needs a CAUSAL attention");
    if (c.dataType != PSK_DATA_TYPE_FLOAT32) fail(PSK_ERROR_UNSUPPORTED, "incremental decoding supports float32 attention only");
    batch_ = info.batchSize ? info.batchSize : 1;
    Hq_ = c.numQueryHeads;
    Hkv_ = c.numKeyValueHeads;
    h_ = c.headDim;
    dv_ = c.valueDim;
    local_ = c.localExact;
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    if (uint64_t(batch_) * Hq_ > limits.maxComputeWorkGroupCount[1] || Hq_ > limits.maxComputeWorkGroupCount[0] ||
        slots > limits.maxComputeWorkGroupCount[2])
        fail(PSK_ERROR_TOO_LARGE, "batchSize ", batch_, " exceeds the device's dispatch limits");
    auto checkRange = [&](const char* what, uint64_t floats) {
        if (floats >= (uint64_t(1) << 32) || floats * 4 > limits.maxStorageBufferRange)
            fail(PSK_ERROR_TOO_LARGE, "the decode state's ", what, " needs ", floats * 4,
                 " bytes, more than one storage buffer binding can address (", limits.maxStorageBufferRange, ")");
    };

    if (polysketch()) {
        if (info.capacity != 0) fail(PSK_ERROR_INVALID_ARGUMENT, "capacity must be 0 for a POLYSKETCH decode state (it does not grow)");
        const PolysketchPlan& plan = attention->polysketch()->plan();
        R_ = plan.sketchLength;
        F_ = plan.features;
        b_ = plan.blockSize;
        checkRange("z", slots * F_ * (dv_ + 1));
        if (ceilDiv(uint64_t(F_) * ((dv_ + 4) / 4), kWorkgroup) > limits.maxComputeWorkGroupCount[0])
            fail(PSK_ERROR_TOO_LARGE, "the state z of one head needs more workgroups than the device allows");
        z_ = deviceBuffer(slots * F_ * (dv_ + 1) * 4);
        if (local_) {
            checkRange("block rows", slots * b_ * std::max(std::max(R_, h_), dv_));
            blockH_ = deviceBuffer(slots * F_ * (dv_ + 1) * 4);
            blockK_ = deviceBuffer(slots * b_ * h_ * 4);
            blockV_ = deviceBuffer(slots * b_ * dv_ * 4);
        }
        const ForwardGeometry g1 = makeForwardGeometry(c, caps, batch_, 1, nullptr, nullptr, nullptr, nullptr);
        // The feature rows of the one-token forward's workspace layout; its block-state region
        // (the last one) is not needed: the step runs the feature map alone.
        stepWorkspace_ = deviceBuffer(attention->polysketch()->workspace(g1).states.offset);
        kernel::DecodeFoldSpec foldSpec;
        foldSpec.WG = kWorkgroup;
        foldSpec.SKETCH = R_;
        foldSpec.VALUE_DIM = dv_;
        kernel::DecodeOutputSpec outputSpec;
        outputSpec.WG = kWorkgroup;
        outputSpec.SKETCH = R_;
        outputSpec.HEAD_DIM = h_;
        outputSpec.VALUE_DIM = dv_;
        outputSpec.DEGREE = c.degree;
        outputSpec.LOCAL_EXACT = local_ ? 1u : 0u;
        outputSpec.BLOCK = local_ ? b_ : 1u;
        kernels_.push_back(KernelChoice::make(KernelId::DecodeFold, "", PSK_DATA_TYPE_FLOAT32, foldSpec,
                                              "polysketch decoding: a token's phi(k)[v | 1] (or a finished block) into z"));
        kernels_.push_back(KernelChoice::make(KernelId::DecodeOutput, "", PSK_DATA_TYPE_FLOAT32, outputSpec,
                                              "polysketch decoding: phi(q)^T z (+ exact local part), normalized"));
        Pipelines& pipelines = context()->pipelines();
        fold_ = pipelines.get(kernels_[0]);
        output_ = pipelines.get(kernels_[1]);
    } else {
        if (info.capacity == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "a SOFTMAX decode state needs a capacity (tokens per sequence)");
        if (info.capacity > kMaxCapacity)
            fail(PSK_ERROR_TOO_LARGE, "capacity ", info.capacity, " exceeds the maximum ", kMaxCapacity);
        capacity_ = info.capacity;
        // One slot's cache must fit a binding; the whole cache may not (4 heads of 128k tokens at
        // h = 64 are 128 MiB + 9 KiB, lavapipe's maxStorageBufferRange is 128 MiB): the step then
        // binds and dispatches slot by slot. Slot strides are rounded up to the offset alignment.
        checkRange("key cache of one sequence and head", uint64_t(capacity_) * std::max(h_, dv_));
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
        checkRange("partials", uint64_t(batch_) * Hq_ * maxChunks_ * (dv_ + 2));
        partials_ = deviceBuffer(uint64_t(batch_) * Hq_ * maxChunks_ * (dv_ + 2) * 4);
        kernel::DecodeSoftmaxSpec spec;
        spec.WG = kWorkgroup;
        spec.HEAD_DIM = h_;
        spec.VALUE_DIM = dv_;
        spec.CHUNK = chunk_;
        kernels_.push_back(KernelChoice::make(KernelId::DecodeSoftmaxPartial, "", PSK_DATA_TYPE_FLOAT32, spec,
                                              "softmax decoding: a KV-cache pass per chunk of keys"));
        kernels_.push_back(KernelChoice::make(KernelId::DecodeSoftmaxCombine, "", PSK_DATA_TYPE_FLOAT32, spec,
                                              "softmax decoding: combines the chunks' partials"));
        Pipelines& pipelines = context()->pipelines();
        partial_ = pipelines.get(kernels_[0]);
        combine_ = pipelines.get(kernels_[1]);
    }
    positions_.assign(batch_, 0);

    qIn_ = hostBuffer(uint64_t(batch_) * Hq_ * h_ * 4, MemoryUsage::HostUpload);
    kIn_ = hostBuffer(slots * h_ * 4, MemoryUsage::HostUpload);
    vIn_ = hostBuffer(slots * dv_ * 4, MemoryUsage::HostUpload);
    out_ = hostBuffer(uint64_t(batch_) * Hq_ * dv_ * 4, MemoryUsage::HostReadback);
    meta_ = deviceBuffer(uint64_t(batch_) * 2 * 4);

    const DeviceFunctions& vk = context()->vk();
    VkDevice device = context()->device();
    try {
        VkCommandPoolCreateInfo poolInfo{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
        poolInfo.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
        poolInfo.queueFamilyIndex = context()->queueFamily();
        PSK_VK(vk.vkCreateCommandPool(device, &poolInfo, vk.callbacks, &commandPool_));
        VkCommandBufferAllocateInfo cbInfo{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
        cbInfo.commandPool = commandPool_;
        cbInfo.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
        cbInfo.commandBufferCount = 1;
        PSK_VK(vk.vkAllocateCommandBuffers(device, &cbInfo, &commandBuffer_));
        VkFenceCreateInfo fenceInfo{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
        PSK_VK(vk.vkCreateFence(device, &fenceInfo, vk.callbacks, &fence_));
        if (caps.timestampValidBits > 0) {
            VkQueryPoolCreateInfo queryInfo{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
            queryInfo.queryType = VK_QUERY_TYPE_TIMESTAMP;
            queryInfo.queryCount = 2;
            PSK_VK(vk.vkCreateQueryPool(device, &queryInfo, vk.callbacks, &queryPool_));
        }
        if (!context()->pipelines().usesPushDescriptors()) descriptors_ = std::make_unique<DescriptorArena>(vk, device);
        // A new state is empty: z = 0 (the caches need no clearing: positions bound what is read).
        // The block rows are zeroed too, so that a serialized blob (which holds them in full)
        // depends only on what the state consumed.
        if (polysketch())
            submit([&](Recorder& rec) {
                for (const Buffer* b : {&z_, &blockH_, &blockK_, &blockV_})
                    if (*b) rec.fill({b->handle(), 0, b->size()}, b->size(), 0);
            });
    } catch (...) {
        releaseVulkanObjects();
        throw;
    }
}

PskDecodeState_T::~PskDecodeState_T() { releaseVulkanObjects(); }

void PskDecodeState_T::releaseVulkanObjects() {
    const DeviceFunctions& vk = context()->vk();
    VkDevice device = context()->device();
    descriptors_.reset();
    commandDescriptors_.reset();
    if (queryPool_) vk.vkDestroyQueryPool(device, queryPool_, vk.callbacks);
    if (fence_) vk.vkDestroyFence(device, fence_, vk.callbacks);
    if (commandPool_) vk.vkDestroyCommandPool(device, commandPool_, vk.callbacks);
    queryPool_ = VK_NULL_HANDLE;
    fence_ = VK_NULL_HANDLE;
    commandPool_ = VK_NULL_HANDLE;
}

Buffer PskDecodeState_T::deviceBuffer(VkDeviceSize bytes) {
    const VkBufferUsageFlags flags = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    return Buffer(context()->allocator(), std::max<VkDeviceSize>(bytes, 16), flags, MemoryUsage::DeviceLocal);
}

Buffer PskDecodeState_T::hostBuffer(VkDeviceSize bytes, MemoryUsage usage) {
    const VkBufferUsageFlags flags = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                                     VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    Buffer buffer(context()->allocator(), std::max<VkDeviceSize>(bytes, 16), flags, usage);
    if (!buffer.mapped()) fail(PSK_ERROR_INTERNAL, "host-visible buffer is not mapped");
    return buffer;
}

void PskDecodeState_T::submit(const std::function<void(Recorder&)>& record, double* gpuMs) {
    const DeviceFunctions& vk = context()->vk();
    VkDevice device = context()->device();
    PSK_VK(vk.vkResetCommandPool(device, commandPool_, 0));
    if (descriptors_) descriptors_->reset();
    VkCommandBufferBeginInfo begin{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    begin.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    PSK_VK(vk.vkBeginCommandBuffer(commandBuffer_, &begin));
    const bool timed = gpuMs && queryPool_;
    Recorder rec(vk, commandBuffer_, context()->pipelines(), descriptors_.get());
    if (timed) {
        vk.vkCmdResetQueryPool(commandBuffer_, queryPool_, 0, 2);
        rec.timestamp(queryPool_, 0);
    }
    record(rec);
    if (timed) rec.timestamp(queryPool_, 1);
    rec.finishForHost();
    PSK_VK(vk.vkEndCommandBuffer(commandBuffer_));
    PSK_VK(vk.vkResetFences(device, 1, &fence_));
    context()->submitAndWait(commandBuffer_, fence_);
    if (timed) {
        const DeviceCaps& caps = context()->caps();
        uint64_t ticks[2] = {0, 0};
        PSK_VK(vk.vkGetQueryPoolResults(device, queryPool_, 0, 2, sizeof(ticks), ticks, sizeof(uint64_t),
                                        VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
        const uint64_t mask = caps.timestampValidBits >= 64 ? ~uint64_t(0) : (uint64_t(1) << caps.timestampValidBits) - 1;
        *gpuMs = double((ticks[1] - ticks[0]) & mask) * caps.limits().timestampPeriod * 1e-6;
    }
}

uint64_t PskDecodeState_T::stateBytes() const {
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    uint64_t bytes = uint64_t(batch_) * 8;
    if (polysketch()) {
        bytes += slots * F_ * (dv_ + 1) * 4;
        if (local_) bytes += slots * (uint64_t(F_) * (dv_ + 1) + uint64_t(b_) * (h_ + dv_)) * 4;
    } else {
        bytes += slots * capacity_ * (h_ + dv_) * 4;
    }
    return bytes;
}

uint64_t PskDecodeState_T::position(uint32_t sequence) const {
    if (sequence >= batch_) fail(PSK_ERROR_INVALID_ARGUMENT, "sequence ", sequence, " is out of range (batchSize ", batch_, ")");
    return positions_[sequence];
}

void PskDecodeState_T::checkPromptInputs(const PskDecodePrefillInfo& info, uint32_t count) const {
    const uint64_t n = info.seqLen;
    const struct {
        const char* name;
        const void* pointer;
        size_t given;
        uint64_t needed;
    } arrays[] = {{"q", info.q, info.qBytes, uint64_t(count) * Hq_ * n * h_ * 4},
                  {"k", info.k, info.kBytes, uint64_t(count) * Hkv_ * n * h_ * 4},
                  {"v", info.v, info.vBytes, uint64_t(count) * Hkv_ * n * dv_ * 4}};
    for (const auto& a : arrays)
        if (!a.pointer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->", a.name, " must not be NULL");
    for (const auto& a : arrays)
        if (a.given < a.needed) fail(PSK_ERROR_BUFFER_TOO_SMALL, a.name, " holds ", a.given, " bytes; the shape needs ", a.needed);
    for (const auto& a : arrays) checkFiniteFloats(a.name, a.pointer, a.needed / 4);
}

void PskDecodeState_T::prefill(const PskDecodePrefillInfo& info) {
    const uint32_t count = info.batchSize ? info.batchSize : 1;
    if (uint64_t(info.firstSequence) + count > batch_)
        fail(PSK_ERROR_INVALID_ARGUMENT, "sequences ", info.firstSequence, " to ", uint64_t(info.firstSequence) + count - 1,
             " are out of range (the state has batchSize ", batch_, ")");
    if (info.seqLen == 0) fail(PSK_ERROR_INVALID_SHAPE, "seqLen must be at least 1");
    if (!polysketch() && info.seqLen > capacity_)
        fail(PSK_ERROR_BUFFER_TOO_SMALL, "a prompt of ", info.seqLen, " tokens does not fit the KV cache (capacity ", capacity_, ")");
    const AttentionConfig& c = attention_->config();
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
    if (info.out) {
        // Checks every pointer, size and value and writes `out` only when it succeeds.
        if (polysketch()) {
            Buffer staging, prefix;
            attention_->forwardHost(fwd, [&](Recorder& rec, const BoundTensors& t) {
                recordAbsorbPrompt(rec, t, info.v, defaultStrides(c.layout, Hkv_, info.seqLen, dv_), count, info.seqLen,
                                   info.firstSequence * Hkv_, false, staging, prefix);
            });
            for (uint32_t s = 0; s < count; ++s) positions_[info.firstSequence + s] = info.seqLen;
            return;
        }
        attention_->forwardHost(fwd);
    } else {
        // State only: the prompt's rows are not wanted. Softmax needs no forward at all (the KV
        // cache is the prompt's k and v).
        checkPromptInputs(info, count);
        if (polysketch()) {
            prefillPolysketchStateOnly(info, count);
            return;
        }
    }

    const uint32_t n = info.seqLen, s0 = info.firstSequence * Hkv_, slots = count * Hkv_;
    const PskTensorStrides kStrides = defaultStrides(c.layout, Hkv_, n, h_);
    const PskTensorStrides vStrides = defaultStrides(c.layout, Hkv_, n, dv_);
    if (!polysketch()) {
        const std::vector<float> K = gatherRows(info.k, kStrides, count, Hkv_, 0, n, h_);
        const std::vector<float> V = gatherRows(info.v, vStrides, count, Hkv_, 0, n, dv_);
        Buffer staging = hostBuffer((K.size() + V.size()) * 4, MemoryUsage::HostUpload);
        std::memcpy(staging.mapped(), K.data(), K.size() * 4);
        std::memcpy(staging.mapped() + K.size() * 4, V.data(), V.size() * 4);
        submit([&](Recorder& rec) {
            for (uint32_t i = 0; i < slots; ++i) {
                rec.copy({staging.handle(), VkDeviceSize(i) * n * h_ * 4, VkDeviceSize(n) * h_ * 4},
                         {kCache_.handle(), VkDeviceSize(s0 + i) * kSlot_ * 4, VkDeviceSize(n) * h_ * 4},
                         VkDeviceSize(n) * h_ * 4);
                rec.copy({staging.handle(), K.size() * 4 + VkDeviceSize(i) * n * dv_ * 4, VkDeviceSize(n) * dv_ * 4},
                         {vCache_.handle(), VkDeviceSize(s0 + i) * vSlot_ * 4, VkDeviceSize(n) * dv_ * 4},
                         VkDeviceSize(n) * dv_ * 4);
            }
        });
        for (uint32_t s = 0; s < count; ++s) positions_[info.firstSequence + s] = n;
        return;
    }

    fail(PSK_ERROR_INTERNAL, "decode prefill: unreachable");
}

void PskDecodeState_T::recordAbsorbPrompt(Recorder& rec, const BoundTensors& forward, const void* v, const PskTensorStrides& vStrides,
                                          uint32_t count, uint32_t n, uint32_t s0, bool accumulate, Buffer& staging,
                                          Buffer& prefix) {
    const AttentionConfig& c = attention_->config();
    const uint32_t slots = count * Hkv_;
    const PolysketchForward& pk = *attention_->polysketch();
    const PolysketchPlan& plan = pk.plan();
    const PolysketchWorkspace ws = pk.workspace(forward.geometry);
    (void)c;
    const uint32_t t = ws.blocks, lastBegin = (t - 1) * b_, lastRows = n - lastBegin;
    const bool keepRows = local_ && lastRows < b_;
    const std::vector<float> vLast = gatherRows(v, vStrides, count, Hkv_, lastBegin, lastRows, dv_);
    staging = hostBuffer(vLast.size() * 4, MemoryUsage::HostUpload);
    std::memcpy(staging.mapped(), vLast.data(), vLast.size() * 4);
    const VkBuffer work = forward.workspace.buffer;
    const VkDeviceSize base = forward.workspace.offset;
    const VkDeviceSize zBytes = VkDeviceSize(F_) * (dv_ + 1) * 4;
    const VkDeviceSize stateRow = VkDeviceSize(plan.stateStride) * 4, stateBytes = F_ * stateRow;
    // Accumulating (a later chunk of a state-only prefill): Z_{t-1} of this chunk goes through a
    // scratch copy and is added into z (decode_fold's add mode).
    if (accumulate) prefix = deviceBuffer(VkDeviceSize(slots) * zBytes);
    {
        // z = Z_{t-1}, the forward's exclusive prefix at the last block (zero when t = 1). The
        // forward pads its state rows to plan.stateStride floats; z rows are dv + 1.
        const Buffer& zDst = accumulate ? prefix : z_;
        const uint32_t zSlot0 = accumulate ? 0 : s0;
        for (uint32_t i = 0; i < slots; ++i)
            rec.copyRows({work, base + ws.states.offset + (VkDeviceSize(i) * t + (t - 1)) * stateBytes, stateBytes}, stateRow,
                         {zDst.handle(), VkDeviceSize(zSlot0 + i) * zBytes, zBytes}, (dv_ + 1) * 4, (dv_ + 1) * 4, F_);
        if (accumulate) {
            const FoldPush add{F_, Hkv_, s0, 1, 0, 0, 0, 0, 0, 0, 1};
            rec.dispatch(fold_,
                         {reads({prefix.handle(), 0, prefix.size()}), reads({prefix.handle(), 0, prefix.size()}),
                          reads(pk.resources().pairs), reads({meta_.handle(), 0, meta_.size()}),
                          writes({z_.handle(), 0, z_.size()})},
                         &add, sizeof(add), ceilDiv(uint64_t(F_) * ((dv_ + 4) / 4), kWorkgroup), 1, slots);
        }
        // Local exact: the running sum h of the unfinished block starts from zero.
        if (local_) rec.fill({blockH_.handle(), VkDeviceSize(s0) * zBytes, VkDeviceSize(slots) * zBytes}, VkDeviceSize(slots) * zBytes, 0);
        if (keepRows)
            // Local exact, unfinished last block: its k' and v rows stay for the exact local part.
            for (uint32_t i = 0; i < slots; ++i) {
                const VkDeviceSize kBytes = VkDeviceSize(lastRows) * h_ * 4, vBytes = VkDeviceSize(lastRows) * dv_ * 4;
                rec.copy({work, base + ws.kLocal.offset + (VkDeviceSize(i) * n + lastBegin) * h_ * 4, kBytes},
                         {blockK_.handle(), VkDeviceSize(s0 + i) * b_ * h_ * 4, kBytes}, kBytes);
                rec.copy({staging.handle(), VkDeviceSize(i) * vBytes, vBytes},
                         {blockV_.handle(), VkDeviceSize(s0 + i) * b_ * dv_ * 4, vBytes}, vBytes);
            }
        // The last block's phi(k)[v | 1] sum: into z (complete, or any block when the local part
        // is sketched), or into h (local exact, unfinished).
        const Buffer& dst = keepRows ? blockH_ : z_;
        const FoldPush push{F_, Hkv_, s0, lastRows, 0, 0, n * R_, lastBegin, lastRows * dv_, 0, 0};
        rec.dispatch(fold_,
                     {reads({work, base + ws.kSketch.offset, ws.kSketch.size}), reads({staging.handle(), 0, staging.size()}),
                      reads(pk.resources().pairs), reads({meta_.handle(), 0, meta_.size()}),
                      writes({dst.handle(), 0, dst.size()})},
                     &push, sizeof(push), ceilDiv(uint64_t(F_) * ((dv_ + 4) / 4), kWorkgroup), 1, slots);
    }
}

void PskDecodeState_T::prefillPolysketchStateOnly(const PskDecodePrefillInfo& info, uint32_t count) {
    // The forward over the whole prompt when one call can hold it, else over chunks of whole
    // blocks (a call's workspace must fit one storage-buffer binding: 64k tokens at b = 256,
    // r = 32, dv = 64, 4 heads exceed lavapipe's 128 MiB), each chunk's block sums added into z.
    const AttentionConfig& c = attention_->config();
    const DeviceCaps& caps = context()->caps();
    const uint32_t n = info.seqLen;
    auto fits = [&](uint32_t len) {
        try {
            const ForwardGeometry g = makeForwardGeometry(c, caps, count, len, nullptr, nullptr, nullptr, nullptr);
            (void)attention_->polysketch()->workspace(g);
            return true;
        } catch (const Error& e) {
            if (e.code() != PSK_ERROR_TOO_LARGE) throw;
            return false;
        }
    };
    uint32_t chunk = n;
    // PSK_DECODE_PREFILL_CHUNK=N caps the chunk at N tokens (rounded down to whole blocks), for
    // the tests of the chunked path on small prompts.
    if (const char* cap = std::getenv("PSK_DECODE_PREFILL_CHUNK"))
        if (const unsigned long tokens = std::strtoul(cap, nullptr, 10)) chunk = std::min<uint64_t>(chunk, std::max<uint64_t>(b_, tokens / b_ * b_));
    while (chunk > b_ && !fits(chunk)) chunk = std::max(b_, (chunk / 2) / b_ * b_);
    const PskTensorStrides qS = defaultStrides(c.layout, Hq_, n, h_), kS = defaultStrides(c.layout, Hkv_, n, h_),
                           vS = defaultStrides(c.layout, Hkv_, n, dv_);
    for (uint32_t t0 = 0; t0 < n; t0 += chunk) {
        const uint32_t rows = std::min(chunk, n - t0);
        std::vector<float> q, k, v;
        PskForwardHostInfo fwd{};
        fwd.batchSize = count;
        fwd.seqLen = rows;
        if (rows == n) {
            fwd.q = info.q;
            fwd.k = info.k;
            fwd.v = info.v;
        } else {
            q = gatherTokens(info.q, qS, count, Hq_, t0, rows, h_, c.layout);
            k = gatherTokens(info.k, kS, count, Hkv_, t0, rows, h_, c.layout);
            v = gatherTokens(info.v, vS, count, Hkv_, t0, rows, dv_, c.layout);
            fwd.q = q.data();
            fwd.k = k.data();
            fwd.v = v.data();
        }
        fwd.qBytes = size_t(count) * Hq_ * rows * h_ * 4;
        fwd.kBytes = size_t(count) * Hkv_ * rows * h_ * 4;
        fwd.vBytes = size_t(count) * Hkv_ * rows * dv_ * 4;
        std::vector<uint8_t> scratch(size_t(count) * Hq_ * rows * dv_ * 4);  // rows not wanted
        fwd.out = scratch.data();
        fwd.outBytes = scratch.size();
        Buffer staging, prefix;
        attention_->forwardHost(fwd, [&](Recorder& rec, const BoundTensors& t) {
            recordAbsorbPrompt(rec, t, fwd.v, defaultStrides(c.layout, Hkv_, rows, dv_), count, rows, info.firstSequence * Hkv_,
                               t0 > 0, staging, prefix);
        });
    }
    for (uint32_t s = 0; s < count; ++s) positions_[info.firstSequence + s] = n;
}

void PskDecodeState_T::stepBytes(uint64_t bytes[4]) const {
    bytes[0] = uint64_t(batch_) * Hq_ * h_ * 4;
    bytes[1] = uint64_t(batch_) * Hkv_ * h_ * 4;
    bytes[2] = uint64_t(batch_) * Hkv_ * dv_ * 4;
    bytes[3] = uint64_t(batch_) * Hq_ * dv_ * 4;
}

void PskDecodeState_T::checkRoomForStep() const {
    if (!polysketch())
        for (uint32_t s = 0; s < batch_; ++s)
            if (positions_[s] >= capacity_)
                fail(PSK_ERROR_BUFFER_TOO_SMALL, "sequence ", s, " is full: its KV cache holds ", capacity_,
                     " tokens (the capacity given at creation)");
}

void PskDecodeState_T::step(const PskDecodeStepInfo& info) {
    uint64_t needed[4];
    stepBytes(needed);
    const struct {
        const char* name;
        const void* pointer;
        size_t given;
    } arrays[] = {{"q", info.q, info.qBytes}, {"k", info.k, info.kBytes}, {"v", info.v, info.vBytes}, {"out", info.out, info.outBytes}};
    for (const auto& a : arrays)
        if (!a.pointer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->", a.name, " must not be NULL");
    for (int i = 0; i < 4; ++i)
        if (arrays[i].given < needed[i])
            fail(PSK_ERROR_BUFFER_TOO_SMALL, arrays[i].name, " holds ", arrays[i].given, " bytes; the shape needs ", needed[i]);
    for (int i = 0; i < 3; ++i) checkFiniteFloats(arrays[i].name, arrays[i].pointer, needed[i] / 4);
    checkRoomForStep();

    std::memcpy(qIn_.mapped(), info.q, needed[0]);
    std::memcpy(kIn_.mapped(), info.k, needed[1]);
    std::memcpy(vIn_.mapped(), info.v, needed[2]);
    const StepTensors t{{qIn_.handle(), 0, needed[0]}, {kIn_.handle(), 0, needed[1]}, {vIn_.handle(), 0, needed[2]},
                        {out_.handle(), 0, needed[3]}};
    double gpuMs = 0;
    submit([&](Recorder& rec) { recordStep(rec, t); }, info.stats ? &gpuMs : nullptr);

    std::memcpy(info.out, out_.mapped(), needed[3]);
    for (uint64_t& p : positions_) ++p;
    if (info.stats) {
        info.stats->gpuMilliseconds = gpuMs;
        info.stats->workspaceBytes = stepWorkspace_ ? stepWorkspace_.size() : partials_.size();
    }
}

void PskDecodeState_T::cmdStep(VkCommandBuffer commandBuffer, const PskCmdDecodeStepInfo& info) {
    if (!commandBuffer) fail(PSK_ERROR_INVALID_ARGUMENT, "commandBuffer must not be VK_NULL_HANDLE");
    uint64_t needed[4];
    stepBytes(needed);
    const struct {
        const char* name;
        const PskVulkanTensor& t;
    } tensors[] = {{"q", info.q}, {"k", info.k}, {"v", info.v}, {"out", info.out}};
    const VkDeviceSize align = std::max<VkDeviceSize>(context()->caps().limits().minStorageBufferOffsetAlignment, 1);
    for (const auto& x : tensors) {
        if (!x.t.buffer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->", x.name, ".buffer must not be VK_NULL_HANDLE");
        if (x.t.strides)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->", x.name, ".strides must be NULL: step tensors are dense [B, heads, dim]");
        if (x.t.offset % align)
            fail(PSK_ERROR_INVALID_ARGUMENT, "info->", x.name, ".offset ", x.t.offset,
                 " is not a multiple of the device's minStorageBufferOffsetAlignment (", align, ")");
    }
    for (int i = 0; i < 4; ++i)
        if (tensors[i].t.size < needed[i])
            fail(PSK_ERROR_BUFFER_TOO_SMALL, "info->", tensors[i].name, ".size is ", tensors[i].t.size, " bytes; the shape needs ",
                 needed[i]);
    checkRoomForStep();

    const DeviceFunctions& vk = context()->vk();
    if (!context()->pipelines().usesPushDescriptors() && !commandDescriptors_)
        commandDescriptors_ = std::make_unique<DescriptorArena>(vk, context()->device());
    // Orders this step after everything recorded before it (an earlier step of this state in the
    // same command buffer or one submitted before): they share meta_, the scratch and the state.
    VkMemoryBarrier barrier{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    barrier.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    barrier.dstAccessMask =
        VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    const VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    vk.vkCmdPipelineBarrier(commandBuffer, stages, stages, 0, 1, &barrier, 0, nullptr, 0, nullptr);
    Recorder rec(vk, commandBuffer, context()->pipelines(), commandDescriptors_.get());
    const StepTensors t{{info.q.buffer, info.q.offset, needed[0]},
                        {info.k.buffer, info.k.offset, needed[1]},
                        {info.v.buffer, info.v.offset, needed[2]},
                        {info.out.buffer, info.out.offset, needed[3]}};
    recordStep(rec, t);
    for (uint64_t& p : positions_) ++p;
}

void PskDecodeState_T::resetCommandDescriptors() {
    if (commandDescriptors_) commandDescriptors_->reset();
}

void PskDecodeState_T::recordStepFeatures(Recorder& rec, const StepTensors& t, const ForwardGeometry& g1,
                                          const PolysketchWorkspace& ws) {
    // The feature-map dispatches of recordPolysketch (forward/polysketch_forward.cpp) for n = 1, and
    // nothing else: the forward's block states, scan and output over the one token are not
    // needed (they were ~70% of a step's GPU time on lavapipe). Same kernel, pipeline and
    // parameters, so S(q), S(k), q', k' are the forward's bit for bit.
    const PolysketchForward& pk = *attention_->polysketch();
    const FeatureMapRanges ranges = featureMapRanges(pk.plan(), attention_->config(), ws, {stepWorkspace_.handle(), 0, VK_WHOLE_SIZE});
    recordFeatureMaps(rec, pk.plan(), pk.resources(), pk.sketch(), attention_->config(), g1, t.q, t.k, ranges);
}

void PskDecodeState_T::recordStep(Recorder& rec, const StepTensors& t) {
    // Per-sequence counts: [rows of the unfinished block | keys] then [rows to fold].
    std::vector<uint32_t> counts(size_t(batch_) * 2, 0);
    bool anyFold = false;
    uint64_t longest = 0;
    for (uint32_t s = 0; s < batch_; ++s) {
        const uint64_t pos = positions_[s];
        if (polysketch()) {
            counts[s] = local_ ? uint32_t(pos % b_) + 1 : 0;  // this token's row included
            counts[batch_ + s] = local_ && counts[s] == b_ ? b_ : 0;
            anyFold |= counts[batch_ + s] != 0;
        } else {
            counts[s] = uint32_t(pos + 1);  // keys this step attends to
            longest = std::max(longest, pos + 1);
        }
    }
    // Written by fills (one per run of equal values) inside the recording: a pending recorded step
    // keeps its own counts whatever is recorded after it.
    for (size_t i = 0; i < counts.size();) {
        size_t j = i + 1;
        while (j < counts.size() && counts[j] == counts[i]) ++j;
        rec.fill({meta_.handle(), VkDeviceSize(i) * 4, VkDeviceSize(j - i) * 4}, VkDeviceSize(j - i) * 4, counts[i]);
        i = j;
    }
    const uint32_t slots = batch_ * Hkv_;
    const BufferRange meta{meta_.handle(), 0, VkDeviceSize(batch_) * 2 * 4};

    if (!polysketch()) {
        SoftmaxPush push{Hq_, Hkv_, Hq_ / Hkv_, capacity_, maxChunks_, 0, attention_->config().scale, uint32_t(kSlot_),
                         uint32_t(vSlot_), 0, 0, 0};
        for (uint32_t i = 0; i < slots; ++i) {
            const VkDeviceSize pos = positions_[i / Hkv_];
            rec.copy({t.k.buffer, t.k.offset + VkDeviceSize(i) * h_ * 4, VkDeviceSize(h_) * 4},
                     {kCache_.handle(), (i * kSlot_ + pos * h_) * 4, VkDeviceSize(h_) * 4}, VkDeviceSize(h_) * 4);
            rec.copy({t.v.buffer, t.v.offset + VkDeviceSize(i) * dv_ * 4, VkDeviceSize(dv_) * 4},
                     {vCache_.handle(), (i * vSlot_ + pos * dv_) * 4, VkDeviceSize(dv_) * 4}, VkDeviceSize(dv_) * 4);
        }
        const BufferRange partials{partials_.handle(), 0, partials_.size()};
        if (wholeCache_) {
            rec.dispatch(partial_,
                         {reads(t.q), reads({kCache_.handle(), 0, kCache_.size()}), reads({vCache_.handle(), 0, vCache_.size()}),
                          reads(meta), writes(partials)},
                         &push, sizeof(push), ceilDiv(longest, chunk_), Hq_, batch_);
        } else {
            // One dispatch per (sequence, kv head), binding that slot's caches only.
            for (uint32_t i = 0; i < slots; ++i) {
                push.seq_base = i / Hkv_;
                push.q_head_base = (i % Hkv_) * push.head_ratio;
                push.slot_base = i;
                rec.dispatch(partial_,
                             {reads(t.q), reads({kCache_.handle(), i * kSlot_ * 4, kSlot_ * 4}),
                              reads({vCache_.handle(), i * vSlot_ * 4, vSlot_ * 4}), reads(meta), writes(partials)},
                             &push, sizeof(push), ceilDiv(positions_[i / Hkv_] + 1, chunk_), push.head_ratio, 1);
            }
            push.seq_base = push.q_head_base = push.slot_base = 0;
        }
        rec.dispatch(combine_, {reads(partials), reads(meta), writes(t.out)}, &push, sizeof(push), Hq_, batch_);
        return;
    }

    const AttentionConfig& c = attention_->config();
    const DeviceCaps& caps = context()->caps();
    const PolysketchResources& res = attention_->polysketch()->resources();
    const ForwardGeometry g1 = makeForwardGeometry(c, caps, batch_, 1, nullptr, nullptr, nullptr, nullptr);
    const PolysketchWorkspace ws = attention_->polysketch()->workspace(g1);
    auto sub = [&](const PolysketchWorkspace::Region& r) { return BufferRange{stepWorkspace_.handle(), r.offset, r.size}; };
    const BufferRange z{z_.handle(), 0, z_.size()};
    const uint32_t foldGroups = ceilDiv(uint64_t(F_) * ((dv_ + 4) / 4), kWorkgroup);
    // 1. The forward's feature map over the one new token: S(q), S(k) (and q', k').
    recordStepFeatures(rec, t, g1, ws);
    // 2. The new token joins the state: its phi(k)[v | 1] into z (sketched local) or into the
    //    running sum h of the unfinished block (local exact), whose k' and v rows are also kept.
    {
        const FoldPush push{F_, Hkv_, 0, 1, 0, 0, R_, 0, dv_, 0, 0};
        const BufferRange dst = local_ ? BufferRange{blockH_.handle(), 0, blockH_.size()} : z;
        rec.dispatch(fold_, {reads(sub(ws.kSketch)), reads(t.v), reads(res.pairs), reads(meta), writes(dst)}, &push, sizeof(push),
                     foldGroups, 1, slots);
    }
    if (local_)
        for (uint32_t i = 0; i < slots; ++i) {
            const VkDeviceSize row = VkDeviceSize(i) * b_ + positions_[i / Hkv_] % b_;
            rec.copy({stepWorkspace_.handle(), ws.kLocal.offset + VkDeviceSize(i) * h_ * 4, VkDeviceSize(h_) * 4},
                     {blockK_.handle(), row * h_ * 4, VkDeviceSize(h_) * 4}, VkDeviceSize(h_) * 4);
            rec.copy({t.v.buffer, t.v.offset + VkDeviceSize(i) * dv_ * 4, VkDeviceSize(dv_) * 4},
                     {blockV_.handle(), row * dv_ * 4, VkDeviceSize(dv_) * 4}, VkDeviceSize(dv_) * 4);
        }
    // 3. The output rows.
    const BufferRange qSketch = sub(ws.qSketch);
    const BufferRange bk = local_ ? BufferRange{blockK_.handle(), 0, blockK_.size()} : z;
    const BufferRange bv = local_ ? BufferRange{blockV_.handle(), 0, blockV_.size()} : z;
    const OutputPush push{F_, Hq_, Hkv_, Hq_ / Hkv_, 0};
    rec.dispatch(output_,
                 {reads(qSketch), reads(local_ ? sub(ws.qLocal) : qSketch), reads(z), reads(res.pairs), reads(bk), reads(bv), reads(meta),
                  writes(t.out)},
                 &push, sizeof(push), Hq_, batch_);
    // 4. Local exact: the sums h of blocks this token completed move into z (z += h, then h = 0),
    //    a cost of F (dv + 1) per head, the same as a step's own fold: no step of the block
    //    cycle folds b rows at once.
    if (anyFold) {
        const FoldPush add{F_, Hkv_, 0, 0, 1, batch_, 0, 0, 0, 0, 1};
        const BufferRange h{blockH_.handle(), 0, blockH_.size()};
        rec.dispatch(fold_, {reads(h), reads(bv), reads(res.pairs), reads(meta), writes(z)}, &add, sizeof(add), foldGroups, 1, slots);
        const VkDeviceSize hBytes = VkDeviceSize(Hkv_) * F_ * (dv_ + 1) * 4;
        for (uint32_t s = 0; s < batch_; ++s)
            if (counts[batch_ + s]) rec.fill({blockH_.handle(), s * hBytes, hBytes}, hBytes, 0);
    }
}

void PskDecodeState_T::reset(uint32_t sequence) {
    if (sequence >= batch_) fail(PSK_ERROR_INVALID_ARGUMENT, "sequence ", sequence, " is out of range (batchSize ", batch_, ")");
    if (polysketch()) {
        const VkDeviceSize bytes = VkDeviceSize(Hkv_) * F_ * (dv_ + 1) * 4;
        submit([&](Recorder& rec) {
            rec.fill({z_.handle(), sequence * bytes, bytes}, bytes, 0);
            if (local_) rec.fill({blockH_.handle(), sequence * bytes, bytes}, bytes, 0);
        });
    }
    positions_[sequence] = 0;
}

uint64_t PskDecodeState_T::sketchHash() const {
    if (!polysketch()) return 0;
    const PackedSketch& s = attention_->polysketch()->sketch();
    Fnv fnv;
    fnv.u32(s.learned);
    fnv.u32(s.degree);
    fnv.u32(s.levels);
    fnv.u32(s.sketchLength);
    fnv.u32(s.hidden);
    fnv.bytes(&s.nodeScale, 4);
    fnv.u32(s.qkNorm);
    fnv.u32(s.localNorm);
    fnv.bytes(s.offsets.data(), s.offsets.size() * 4);
    fnv.bytes(s.data.data(), s.data.size() * 4);
    return fnv.h;
}

std::vector<uint8_t> PskDecodeState_T::header() const {
    const AttentionConfig& c = attention_->config();
    std::vector<uint8_t> out(kMagic, kMagic + 8);
    put32(out, kFormatVersion);
    uint32_t scaleBits;
    std::memcpy(&scaleBits, &c.scale, 4);
    const uint32_t fields[11] = {uint32_t(c.kind), polysketch() ? c.degree : 0, R_, polysketch() ? b_ : 0, h_, dv_, Hq_, Hkv_,
                                 uint32_t(c.causal) | uint32_t(c.localExact) << 1 | uint32_t(c.referenceScaling) << 2,
                                 scaleBits, uint32_t(c.dataType)};
    for (uint32_t f : fields) put32(out, f);
    put64(out, sketchHash());
    put32(out, batch_);
    put32(out, capacity_);
    return out;
}

uint64_t PskDecodeState_T::dataBytes(const std::vector<uint64_t>& positions) const {
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    if (polysketch()) return stateBytes() - uint64_t(batch_) * 8;
    uint64_t rows = 0;
    for (uint64_t p : positions) rows += p;
    (void)slots;
    return rows * Hkv_ * (h_ + dv_) * 4;
}

size_t PskDecodeState_T::serializedSize() const { return kHeaderBytes + size_t(batch_) * 8 + dataBytes(positions_); }

void PskDecodeState_T::serialize(void* data, size_t* size) {
    const size_t total = serializedSize();
    if (!data) {
        *size = total;
        return;
    }
    if (*size < total) fail(PSK_ERROR_BUFFER_TOO_SMALL, "*pSize is ", *size, " bytes; the state needs ", total);
    const uint64_t bytes = dataBytes(positions_);
    Buffer readback = hostBuffer(bytes, MemoryUsage::HostReadback);
    submit([&](Recorder& rec) {
        VkDeviceSize at = 0;
        auto whole = [&](const Buffer& b, VkDeviceSize n) {
            rec.copy({b.handle(), 0, n}, {readback.handle(), at, n}, n);
            at += n;
        };
        const uint64_t slots = uint64_t(batch_) * Hkv_;
        if (polysketch()) {
            whole(z_, slots * F_ * (dv_ + 1) * 4);
            if (local_) {
                whole(blockH_, slots * F_ * (dv_ + 1) * 4);
                whole(blockK_, slots * b_ * h_ * 4);
                whole(blockV_, slots * b_ * dv_ * 4);
            }
        } else {
            for (uint64_t i = 0; i < slots; ++i) {
                const uint64_t rows = positions_[i / Hkv_];
                if (!rows) continue;
                rec.copy({kCache_.handle(), i * kSlot_ * 4, rows * h_ * 4}, {readback.handle(), at, rows * h_ * 4}, rows * h_ * 4);
                at += rows * h_ * 4;
                rec.copy({vCache_.handle(), i * vSlot_ * 4, rows * dv_ * 4}, {readback.handle(), at, rows * dv_ * 4},
                         rows * dv_ * 4);
                at += rows * dv_ * 4;
            }
        }
    });
    std::vector<uint8_t> head = header();
    for (uint64_t p : positions_) put64(head, p);
    uint8_t* out = static_cast<uint8_t*>(data);
    std::memcpy(out, head.data(), head.size());
    std::memcpy(out + head.size(), readback.mapped(), bytes);
    *size = total;
}

void PskDecodeState_T::restore(const void* data, size_t size) {
    const uint8_t* in = static_cast<const uint8_t*>(data);
    if (size < kHeaderBytes) fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, less than its ", kHeaderBytes, "-byte header");
    if (std::memcmp(in, kMagic, 8) != 0) fail(PSK_ERROR_BAD_FILE, "not a decode state blob (bad magic)");
    const uint32_t version = get32(in + 8);
    if (version != kFormatVersion)
        fail(PSK_ERROR_BAD_FILE, "state blob format version ", version, " is not supported (this library writes ", kFormatVersion, ")");
    const std::vector<uint8_t> mine = header();
    static const char* const names[] = {"kind",    "degree",   "sketch size", "block size", "headDim",     "valueDim",
                                        "numQueryHeads", "numKeyValueHeads", "flags (causal, local exact, reference scaling)",
                                        "scale",   "dataType"};
    for (int f = 0; f < 11; ++f) {
        const uint32_t theirs = get32(in + 12 + 4 * f), ours = get32(mine.data() + 12 + 4 * f);
        if (theirs != ours)
            fail(PSK_ERROR_BAD_FILE, "state blob belongs to another attention: its ", names[f], " is ", theirs, ", this attention's is ",
                 ours);
    }
    if (get64(in + 56) != get64(mine.data() + 56))
        fail(PSK_ERROR_BAD_FILE, "state blob belongs to another attention: its sketch weights differ (hash mismatch)");
    const uint32_t theirBatch = get32(in + 64);
    if (theirBatch != batch_) fail(PSK_ERROR_BAD_FILE, "state blob holds ", theirBatch, " sequences; this state has batchSize ", batch_);
    if (size < kHeaderBytes + size_t(batch_) * 8)
        fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, its positions end at ", kHeaderBytes + size_t(batch_) * 8);
    std::vector<uint64_t> positions(batch_);
    for (uint32_t s = 0; s < batch_; ++s) {
        positions[s] = get64(in + kHeaderBytes + 8 * s);
        if (!polysketch() && positions[s] > capacity_)
            fail(PSK_ERROR_BAD_FILE, "state blob: sequence ", s, " is at position ", positions[s], ", beyond this state's capacity ",
                 capacity_);
    }
    const uint64_t bytes = dataBytes(positions);
    const uint64_t expected = kHeaderBytes + uint64_t(batch_) * 8 + bytes;
    if (size < expected) fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, expected ", expected);
    if (size > expected) fail(PSK_ERROR_BAD_FILE, "state blob has ", size - expected, " trailing bytes (expected ", expected, ")");
    const uint8_t* payload = in + kHeaderBytes + size_t(batch_) * 8;
    if (bytes) {
        Buffer staging = hostBuffer(bytes, MemoryUsage::HostUpload);
        std::memcpy(staging.mapped(), payload, bytes);
        submit([&](Recorder& rec) {
            VkDeviceSize at = 0;
            auto whole = [&](const Buffer& b, VkDeviceSize n) {
                rec.copy({staging.handle(), at, n}, {b.handle(), 0, n}, n);
                at += n;
            };
            const uint64_t slots = uint64_t(batch_) * Hkv_;
            if (polysketch()) {
                whole(z_, slots * F_ * (dv_ + 1) * 4);
                if (local_) {
                    whole(blockH_, slots * F_ * (dv_ + 1) * 4);
                    whole(blockK_, slots * b_ * h_ * 4);
                    whole(blockV_, slots * b_ * dv_ * 4);
                }
            } else {
                for (uint64_t i = 0; i < slots; ++i) {
                    const uint64_t rows = positions[i / Hkv_];
                    if (!rows) continue;
                    rec.copy({staging.handle(), at, rows * h_ * 4}, {kCache_.handle(), i * kSlot_ * 4, rows * h_ * 4},
                             rows * h_ * 4);
                    at += rows * h_ * 4;
                    rec.copy({staging.handle(), at, rows * dv_ * 4}, {vCache_.handle(), i * vSlot_ * 4, rows * dv_ * 4},
                             rows * dv_ * 4);
                    at += rows * dv_ * 4;
                }
            }
        });
    }
    positions_ = positions;
}
