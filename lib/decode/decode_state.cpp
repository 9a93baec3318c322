// PskDecodeState_T (decode_state.hpp): argument checks, positions, a step's host staging, the
// serialized blob's assembly; what the state is and how a step is recorded is the decoder's
// (polysketch_decoder.cpp, softmax_decoder.cpp).
#include "decode/decode_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "decode/polysketch_decoder.hpp"
#include "decode/softmax_decoder.hpp"
#include "util/error.hpp"
#include "util/storage_type.hpp"
#include "vk/context.hpp"

using namespace psk;

namespace {

/** Throws NON_FINITE_INPUT when one of `count` elements of the storage type is NaN or infinite. */
void checkFiniteElements(const char* name, const void* data, size_t count, PskDataType type) {
    if (type == PSK_DATA_TYPE_FLOAT32) {
        const float* p = static_cast<const float*>(data);
        for (size_t i = 0; i < count; ++i)
            if (!std::isfinite(p[i])) fail(PSK_ERROR_NON_FINITE_INPUT, name, " contains NaN or infinity");
        return;
    }
    // All exponent bits set means infinity or NaN in both 16-bit formats.
    const uint16_t mask = type == PSK_DATA_TYPE_FLOAT16 ? 0x7C00 : 0x7F80;
    const uint16_t* p = static_cast<const uint16_t*>(data);
    for (size_t i = 0; i < count; ++i)
        if ((p[i] & mask) == mask) fail(PSK_ERROR_NON_FINITE_INPUT, name, " contains NaN or infinity");
}

}  // namespace

PskDecodeState_T::PskDecodeState_T(PskAttention attention, const PskDecodeStateCreateInfo& info) : attention_(attention) {
    const AttentionConfig& c = attention->config();
    const VkPhysicalDeviceLimits& limits = context()->caps().limits();
    const bool polysketch = c.kind == PSK_ATTENTION_KIND_POLYSKETCH;
    if (!polysketch && c.kind != PSK_ATTENTION_KIND_SOFTMAX)
        fail(PSK_ERROR_UNSUPPORTED, "incremental decoding supports POLYSKETCH and SOFTMAX attention, not POLYNOMIAL");
    if (!c.causal) fail(PSK_ERROR_UNSUPPORTED, "incremental decoding needs a CAUSAL attention");
    if (info.flags & ~uint32_t(PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT))
        fail(PSK_ERROR_INVALID_ARGUMENT, "flags 0x", std::hex, info.flags, std::dec, " has unknown bits (PskDecodeStateFlagBits)");
    replayable_ = (info.flags & PSK_DECODE_STATE_REPLAYABLE_STEPS_BIT) != 0;
    shape_.batch = info.batchSize ? info.batchSize : 1;
    shape_.Hq = c.numQueryHeads;
    shape_.Hkv = c.numKeyValueHeads;
    shape_.h = c.headDim;
    shape_.dv = c.valueDim;
    const uint32_t batch = shape_.batch, Hq = shape_.Hq;
    if (uint64_t(batch) * Hq > limits.maxComputeWorkGroupCount[1] || Hq > limits.maxComputeWorkGroupCount[0] ||
        uint64_t(batch) * shape_.Hkv > limits.maxComputeWorkGroupCount[2])
        fail(PSK_ERROR_TOO_LARGE, "batchSize ", batch, " exceeds the device's dispatch limits");
    if (polysketch) {
        if (info.capacity != 0) fail(PSK_ERROR_INVALID_ARGUMENT, "capacity must be 0 for a POLYSKETCH decode state (it does not grow)");
    } else {
        if (info.capacity == 0) fail(PSK_ERROR_INVALID_ARGUMENT, "a SOFTMAX decode state needs a capacity (tokens per sequence)");
        if (info.capacity > kMaxDecodeCapacity)
            fail(PSK_ERROR_TOO_LARGE, "capacity ", info.capacity, " exceeds the maximum ", kMaxDecodeCapacity);
    }

    // Members release what was created if a later step throws (the destructor would not run).
    submitter_ = std::make_unique<Submitter>(*context());
    if (polysketch)
        decoder_ = std::make_unique<PolysketchDecoder>(*attention, *submitter_, shape_);
    else
        decoder_ = std::make_unique<SoftmaxDecoder>(*attention, *submitter_, shape_, info.capacity);
    positions_.assign(batch, 0);

    uint64_t bytes[4];
    stepBytes(bytes);
    Allocator& allocator = context()->allocator();
    // The step's kernels read q, k and v from these directly: device-local where the host can map it.
    qIn_ = decodeHostBuffer(allocator, bytes[0], MemoryUsage::HostWriteDeviceRead);
    kIn_ = decodeHostBuffer(allocator, bytes[1], MemoryUsage::HostWriteDeviceRead);
    vIn_ = decodeHostBuffer(allocator, bytes[2], MemoryUsage::HostWriteDeviceRead);
    out_ = decodeHostBuffer(allocator, bytes[3], MemoryUsage::HostReadback);
}

// Members release themselves, in reverse order: the arena of pskCmdDecodeStep, the staging, the
// decoder's state, then the submitter (every host call waited for its own submission).
PskDecodeState_T::~PskDecodeState_T() = default;

uint64_t PskDecodeState_T::stateBytes() const { return uint64_t(shape_.batch) * 8 + decoder_->stateBytes(); }

uint64_t PskDecodeState_T::position(uint32_t sequence) const {
    if (sequence >= shape_.batch)
        fail(PSK_ERROR_INVALID_ARGUMENT, "sequence ", sequence, " is out of range (batchSize ", shape_.batch, ")");
    syncPositions();
    return positions_[sequence];
}

void PskDecodeState_T::syncPositions() const {
    // A recorded step may have been submitted any number of times since the last call, without
    // the library seeing it: with replayable steps every call that needs the positions reads them.
    if (!replayable_) return;
    uint64_t dropped = 0;
    positions_ = decoder_->devicePositions(positions_, &dropped);
    if (dropped)
        fail(PSK_ERROR_BUFFER_TOO_SMALL, "replayed steps found a full KV cache (capacity ", decoder_->capacity(), " tokens) ", dropped,
             " time(s): those tokens were not stored and their steps attended to the stored keys only; the positions stay at the "
             "capacity");
}

void PskDecodeState_T::checkPromptInputs(const PskDecodePrefillInfo& info, uint32_t count) const {
    const uint64_t n = info.seqLen;
    const PskDataType type = attention_->config().dataType;
    const uint64_t eb = elementBytes(type);
    const struct {
        const char* name;
        const void* pointer;
        size_t given;
        uint64_t needed;
    } arrays[] = {{"q", info.q, info.qBytes, uint64_t(count) * shape_.Hq * n * shape_.h * eb},
                  {"k", info.k, info.kBytes, uint64_t(count) * shape_.Hkv * n * shape_.h * eb},
                  {"v", info.v, info.vBytes, uint64_t(count) * shape_.Hkv * n * shape_.dv * eb}};
    for (const auto& a : arrays)
        if (!a.pointer) fail(PSK_ERROR_INVALID_ARGUMENT, "info->", a.name, " must not be NULL");
    for (const auto& a : arrays)
        if (a.given < a.needed) fail(PSK_ERROR_BUFFER_TOO_SMALL, a.name, " holds ", a.given, " bytes; the shape needs ", a.needed);
    for (const auto& a : arrays) checkFiniteElements(a.name, a.pointer, a.needed / eb, type);
}

void PskDecodeState_T::prefill(const PskDecodePrefillInfo& info) {
    syncPositions();
    const uint32_t count = info.batchSize ? info.batchSize : 1;
    if (uint64_t(info.firstSequence) + count > shape_.batch)
        fail(PSK_ERROR_INVALID_ARGUMENT, "sequences ", info.firstSequence, " to ", uint64_t(info.firstSequence) + count - 1,
             " are out of range (the state has batchSize ", shape_.batch, ")");
    if (info.seqLen == 0) fail(PSK_ERROR_INVALID_SHAPE, "seqLen must be at least 1");
    const uint32_t capacity = decoder_->capacity();
    if (capacity && info.seqLen > capacity)
        fail(PSK_ERROR_BUFFER_TOO_SMALL, "a prompt of ", info.seqLen, " tokens does not fit the KV cache (capacity ", capacity, ")");
    // With `out`, the attention's forward checks the arrays (and writes `out` only when it succeeds).
    if (!info.out) checkPromptInputs(info, count);
    decoder_->prefill(info, count);
    for (uint32_t s = 0; s < count; ++s) positions_[info.firstSequence + s] = info.seqLen;
}

uint64_t PskDecodeState_T::checkForward(PskAttention attention, uint32_t batchSize, uint32_t seqLen, uint32_t first) const {
    syncPositions();
    const AttentionConfig& c = attention->config();
    if (c.kind != PSK_ATTENTION_KIND_POLYSKETCH && c.kind != PSK_ATTENTION_KIND_SOFTMAX)
        fail(PSK_ERROR_UNSUPPORTED, "a forward with a decode state needs POLYSKETCH or SOFTMAX attention, not POLYNOMIAL");
    if (!c.causal) fail(PSK_ERROR_UNSUPPORTED, "a forward with a decode state needs a CAUSAL attention");
    if (attention != attention_)
        fail(PSK_ERROR_INVALID_ARGUMENT, "info->state is a decode state of another attention object");
    const uint32_t count = batchSize ? batchSize : 1;
    if (uint64_t(first) + count > shape_.batch)
        fail(PSK_ERROR_INVALID_ARGUMENT, "sequences ", first, " to ", uint64_t(first) + count - 1,
             " are out of range (the state has batchSize ", shape_.batch, ")");
    if (seqLen == 0) fail(PSK_ERROR_INVALID_SHAPE, "seqLen must be at least 1");
    const uint64_t position = positions_[first];
    for (uint32_t s = first + 1; s < first + count; ++s)
        if (positions_[s] != position)
            fail(PSK_ERROR_INVALID_SHAPE, "sequences ", first, " and ", s, " of the state are at positions ", position, " and ",
                 positions_[s], "; a forward with a decode state continues sequences at one position");
    decoder_->checkForward(position, seqLen);
    return position;
}

PskAttention_T::Override PskDecodeState_T::forwardOverride(uint32_t first, uint64_t position, bool recorded) {
    PskAttention_T::Override o;
    o.workspaceLayout = [this](const ForwardGeometry& g) { return stateForwardWorkspaceLayout(*attention_, g); };
    o.record = [this, first, position](Recorder& rec, const BoundTensors& t) { decoder_->recordForward(rec, t, first, position); };
    o.orderAfterEarlierWork = recorded;
    return o;
}

void PskDecodeState_T::forwardHost(PskAttention attention, const PskForwardHostInfo& info) {
    const uint64_t position = checkForward(attention, info.batchSize, info.seqLen, info.stateFirstSequence);
    const PskAttention_T::Override o = forwardOverride(info.stateFirstSequence, position, false);
    // The attention checks the arrays (pointers, sizes, NaN) and writes `out` only when it succeeds.
    attention_->forwardHost(info, {}, &o);
    const uint32_t count = info.batchSize ? info.batchSize : 1;
    for (uint32_t s = 0; s < count; ++s) positions_[info.stateFirstSequence + s] += info.seqLen;
}

void PskDecodeState_T::cmdForward(PskAttention attention, VkCommandBuffer commandBuffer, const PskCmdForwardInfo& info) {
    const uint64_t position = checkForward(attention, info.batchSize, info.seqLen, info.stateFirstSequence);
    const PskAttention_T::Override o = forwardOverride(info.stateFirstSequence, position, true);
    attention_->cmdForward(commandBuffer, info, &o);
    const uint32_t count = info.batchSize ? info.batchSize : 1;
    for (uint32_t s = 0; s < count; ++s) positions_[info.stateFirstSequence + s] += info.seqLen;
}

void PskDecodeState_T::stepBytes(uint64_t bytes[4]) const {
    const uint64_t eb = elementBytes(attention_->config().dataType);  // the attention's storage type
    bytes[0] = uint64_t(shape_.batch) * shape_.Hq * shape_.h * eb;
    bytes[1] = uint64_t(shape_.batch) * shape_.Hkv * shape_.h * eb;
    bytes[2] = uint64_t(shape_.batch) * shape_.Hkv * shape_.dv * eb;
    bytes[3] = uint64_t(shape_.batch) * shape_.Hq * shape_.dv * eb;
}

void PskDecodeState_T::checkRoomForStep() const {
    if (const uint32_t capacity = decoder_->capacity()) {
        for (uint32_t s = 0; s < shape_.batch; ++s)
            if (positions_[s] >= capacity)
                fail(PSK_ERROR_BUFFER_TOO_SMALL, "sequence ", s, " is full: its KV cache holds ", capacity,
                     " tokens (the capacity given at creation)");
    } else {
        // Polysketch: the state does not grow, but positions stop at 2^53, so that the state's
        // blob always restores (decode_blob.hpp).
        for (uint32_t s = 0; s < shape_.batch; ++s)
            if (positions_[s] >= kMaxPolysketchPosition)
                fail(PSK_ERROR_TOO_LARGE, "sequence ", s, " is at position ", positions_[s],
                     ", the limit 2^53 of a POLYSKETCH sequence; reset it (pskResetDecodeSequence)");
    }
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
    const PskDataType type = attention_->config().dataType;
    for (int i = 0; i < 3; ++i) checkFiniteElements(arrays[i].name, arrays[i].pointer, needed[i] / elementBytes(type), type);
    syncPositions();
    checkRoomForStep();

    std::memcpy(qIn_.mapped(), info.q, needed[0]);
    std::memcpy(kIn_.mapped(), info.k, needed[1]);
    std::memcpy(vIn_.mapped(), info.v, needed[2]);
    const StepTensors t{{qIn_.handle(), 0, needed[0]}, {kIn_.handle(), 0, needed[1]}, {vIn_.handle(), 0, needed[2]},
                        {out_.handle(), 0, needed[3]}};
    double gpuMs = 0;
    submitter_->run(
        [&](Recorder& rec) {
            decoder_->recordStep(rec, t, positions_);  // executed once, now: its own positions
            lastStep_ = {rec.dispatchCount(), rec.copyCount(), rec.fillCount(), rec.barrierCount(), 1};
        },
        info.stats ? &gpuMs : nullptr);

    std::memcpy(info.out, out_.mapped(), needed[3]);
    advancePositions();
    if (info.stats) {
        info.stats->gpuMilliseconds = gpuMs;
        info.stats->workspaceBytes = decoder_->stepScratchBytes();
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
    // A replayable step is recorded for no position in particular: its room is checked on the
    // device (softmax) and reported by the next call (syncPositions).
    if (!replayable_) checkRoomForStep();

    const DeviceFunctions& vk = context()->vk();
    if (!context()->pipelines().usesPushDescriptors() && !commandDescriptors_)
        commandDescriptors_ = std::make_unique<DescriptorArena>(vk, context()->device());
    // Orders this step after everything recorded before it (an earlier step of this state in the
    // same command buffer or one submitted before): they share meta, the scratch and the state.
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
    // Replayable: recorded as if every sequence were at its last position (a softmax step's
    // slices cover the whole cache; the keys it reads come from the device's counts).
    const uint32_t capacity = decoder_->capacity();
    decoder_->recordStep(rec, t, replayable_ ? std::vector<uint64_t>(shape_.batch, capacity ? capacity - 1 : 0) : positions_);
    lastStep_ = {rec.dispatchCount(), rec.copyCount(), rec.fillCount(), rec.barrierCount(), 0};
    advancePositions();
}

void PskDecodeState_T::advancePositions() {
    // Replayable: the device counts the steps it executes (the step kernels keep the counts);
    // the next call that needs the positions reads them (syncPositions).
    if (!replayable_)
        for (uint64_t& p : positions_) ++p;
}

void PskDecodeState_T::resetCommandDescriptors() {
    if (commandDescriptors_) commandDescriptors_->reset();
}

void PskDecodeState_T::reset(uint32_t sequence) {
    if (sequence >= shape_.batch)
        fail(PSK_ERROR_INVALID_ARGUMENT, "sequence ", sequence, " is out of range (batchSize ", shape_.batch, ")");
    syncPositions();
    decoder_->reset(sequence);
    positions_[sequence] = 0;
}

DecodeBlobHeader PskDecodeState_T::blobHeader() const { return makeDecodeBlobHeader(*attention_, shape_.batch, decoder_->capacity()); }

uint64_t PskDecodeState_T::blobDataBytes(const std::vector<uint64_t>& positions) const {
    uint64_t bytes = 0;
    decoder_->forEachBlobRegion(positions, [&](const BufferRange& region) { bytes += region.size; });
    return bytes;
}

void PskDecodeState_T::transferBlobData(const std::vector<uint64_t>& positions, const Buffer& host, bool toHost) {
    submitter_->run([&](Recorder& rec) {
        VkDeviceSize at = 0;
        decoder_->forEachBlobRegion(positions, [&](const BufferRange& state) {
            const BufferRange staged{host.handle(), at, state.size};
            if (toHost)
                rec.copy(state, staged, state.size);
            else
                rec.copy(staged, state, state.size);
            at += state.size;
        });
    });
}

size_t PskDecodeState_T::serializedSize() const {
    syncPositions();
    return decodeBlobPrefixBytes(shape_.batch) + blobDataBytes(positions_) + kDecodeBlobTrailerBytes;
}

void PskDecodeState_T::serialize(void* data, size_t* size) {
    const size_t total = serializedSize();
    if (!data) {
        *size = total;
        return;
    }
    if (*size < total) fail(PSK_ERROR_BUFFER_TOO_SMALL, "*pSize is ", *size, " bytes; the state needs ", total);
    const uint64_t bytes = blobDataBytes(positions_);
    Buffer readback = decodeHostBuffer(context()->allocator(), bytes, MemoryUsage::HostReadback);
    transferBlobData(positions_, readback, true);
    const std::vector<uint8_t> prefix = writeDecodeBlobPrefix(blobHeader(), positions_);
    uint8_t* out = static_cast<uint8_t*>(data);
    std::memcpy(out, prefix.data(), prefix.size());
    std::memcpy(out + prefix.size(), readback.mapped(), bytes);
    sealDecodeBlob(out, total);
    *size = total;
}

void PskDecodeState_T::restore(const void* data, size_t size) {
    // Everything is checked before the state is touched: the header, the checksum and the
    // positions (readDecodeBlobPrefix), the size the positions imply, and the data's values.
    syncPositions();  // the device's count of replayed steps starts again from zero
    const uint8_t* in = static_cast<const uint8_t*>(data);
    const DecodeBlobPrefix prefix = readDecodeBlobPrefix(in, size, blobHeader());
    const uint64_t bytes = blobDataBytes(prefix.positions);
    const size_t prefixBytes = decodeBlobPrefixBytes(shape_.batch);
    const uint64_t expected = prefixBytes + bytes + prefix.trailerBytes;
    if (size < expected) fail(PSK_ERROR_BAD_FILE, "state blob truncated: ", size, " bytes, expected ", expected);
    if (size > expected) fail(PSK_ERROR_BAD_FILE, "state blob has ", size - expected, " trailing bytes (expected ", expected, ")");
    // The data is float32 throughout (z, h, block rows; K and V rows). A state built from finite
    // inputs holds finite values; NaN or infinity would make every later step return NaN.
    for (uint64_t i = 0; i < bytes / 4; ++i) {
        uint32_t bits;
        std::memcpy(&bits, in + prefixBytes + 4 * i, 4);
        if ((bits & 0x7F800000u) == 0x7F800000u)
            fail(PSK_ERROR_BAD_FILE, "state blob: its data holds NaN or infinity (float ", i, " of ", bytes / 4, ")");
    }
    if (bytes) {
        Buffer staging = decodeHostBuffer(context()->allocator(), bytes, MemoryUsage::HostUpload);
        std::memcpy(staging.mapped(), in + prefixBytes, bytes);
        transferBlobData(prefix.positions, staging, false);
    }
    decoder_->restorePositions(prefix.positions);
    positions_ = prefix.positions;
}
