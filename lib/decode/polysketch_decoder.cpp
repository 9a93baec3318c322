// psk::PolysketchDecoder (polysketch_decoder.hpp): the polysketch state machine.
//
// Step, one command buffer, one dispatch for every sequence and head (decode_output.comp): the
// token's sketch S(q), S(k) (and the local rows q', k') computed by each workgroup from q and k
// (random sketches), the token joining the state (sketched local: phi(k)[v | 1] into z; local
// exact: into the unfinished block's sum h, its k', v rows into the block, and h into z when the
// token completes the block) and the output row phi(q)^T z (+ the exact local part over the
// unfinished block), over workgroups of feature and block-row slices (decode_step_plan.hpp). q,
// k, v and out are read and written in the storage type. The rows of each unfinished block live
// on the device and the step advances them, so nothing is written between steps. A learned
// sketch's feature map (an MLP per row) runs before it as the forward's own two dispatches.
// Prefill runs the attention's causal forward over the prompt as a forward with the state at
// position 0 (recordForward, the state's z zeroed first): the block scan writes the state after
// the prompt as it goes (its tail: Z_{t-1} plus the last block's sum, or the two apart when local
// exact leaves the last block unfinished, whose k' and v rows are then kept), and the state
// copies it in the same command buffer. Nothing is read from the workspace after the call returns.
#include "decode/polysketch_decoder.hpp"
#include "kernels/kernel_pipeline.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "decode/decode_blob.hpp"
#include "forward/attention.hpp"
#include "kernels/kernel_table.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/context.hpp"
#include "vk/submitter.hpp"

namespace psk {

namespace {

using StepPush = kernel::DecodeOutputPush;

/**
 * Tokens [t0, t0 + rows) of every (b, head) of a host tensor of `eb`-byte elements, as a dense
 * tensor of `rows` tokens in `layout` (the elements copied as they are).
 */
std::vector<uint8_t> gatherTokens(const void* data, const PskTensorStrides& s, uint32_t batch, uint32_t heads, uint32_t t0,
                                  uint32_t rows, uint32_t dim, PskLayout layout, size_t eb) {
    const PskTensorStrides d = defaultStrides(layout, heads, rows, dim);
    std::vector<uint8_t> out(size_t(batch) * heads * rows * dim * eb);
    const uint8_t* src = static_cast<const uint8_t*>(data);
    for (uint32_t b = 0; b < batch; ++b)
        for (uint32_t hd = 0; hd < heads; ++hd)
            for (uint32_t t = 0; t < rows; ++t)
                std::memcpy(&out[(b * uint64_t(d.batch) + hd * uint64_t(d.head) + uint64_t(t) * d.token) * eb],
                            src + (b * uint64_t(s.batch) + hd * uint64_t(s.head) + uint64_t(t0 + t) * s.token) * eb, dim * eb);
    return out;
}

}  // namespace

PolysketchDecoder::PolysketchDecoder(PskAttention_T& attention, Submitter& submitter, const DecodeShape& shape)
    : Decoder(attention, submitter, shape), forward_(*attention.polysketch()) {
    const AttentionConfig& c = attention.config();
    const DeviceCaps& caps = context().caps();
    const PolysketchPlan& plan = forward_.plan();
    const PackedSketch& sketch = forward_.sketch();
    R_ = plan.sketchLength;
    F_ = plan.features;
    b_ = plan.blockSize;
    local_ = c.localExact;
    learned_ = sketch.learned;
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    checkBindingRange("z", slots * F_ * (dv_ + 1));
    z_ = deviceBuffer(slots * F_ * (dv_ + 1) * 4);

    // The step's workgroups: slices of the features and of the block rows (decode_step_plan.hpp).
    DecodeStepShape stepShape;
    stepShape.features = F_;
    stepShape.blockRows = local_ ? b_ : 0;
    stepShape.slots = uint32_t(slots);
    stepShape.headRatio = Hq_ / Hkv_;
    stepShape.headDim = h_;
    stepShape.valueDim = dv_;
    slices_ = planDecodeStep(stepShape, caps.multiprocessorCount, caps.properties.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU);
    // PSK_DECODE_STEP_SLICES="F,R" sets the slices (features, rows per workgroup), for the tests
    // of the combine on small shapes.
    if (const char* text = std::getenv("PSK_DECODE_STEP_SLICES")) parseDecodeStepSlices(text, stepShape, slices_);
    const VkPhysicalDeviceLimits& limits = caps.limits();
    if (slices_.groupsPerSlot() > limits.maxComputeWorkGroupCount[0] || slots > limits.maxComputeWorkGroupCount[1])
        fail(PSK_ERROR_TOO_LARGE, "a decode step of ", slots, " sequence heads needs more workgroups than the device allows");
    // Shared memory: S(k), S(q), q', k', [v | 1], the local weights, the denominators; a random
    // sketch's own feature map adds its rows, their LayerNorm statistics and (p = 8) the nodes.
    const uint64_t ratio = stepShape.headRatio, tokenRows = ratio + 1;
    uint64_t sharedFloats = uint64_t(R_) * (1 + ratio) + uint64_t(h_) * (1 + ratio) + (dv_ + 1) + ratio * (slices_.rowSlice + 1) + 1;
    if (!learned_) sharedFloats += tokenRows * (h_ + 2) + (sketch.levels == 2 ? tokenRows * 2 * R_ : 0) + 1;
    if (sharedFloats * 4 > limits.maxComputeSharedMemorySize)
        fail(PSK_ERROR_TOO_LARGE, "a decode step needs ", sharedFloats * 4, " bytes of shared memory (", Hq_ / Hkv_,
             " query heads per key/value head), more than the device's ", limits.maxComputeSharedMemorySize);

    // The step state (polysketch_decoder.hpp): h and the block rows (local exact), the feature rows
    // of the one-token forward's workspace layout (learned sketch: its block-state region, the last
    // one, is not needed, as the step runs the feature map alone), then the step's words: B row
    // counts, B Hkv slot counters, B sequence counters, the partial sums. Each region starts on the
    // storage offset alignment, so that a forward with the state binds h and the rows directly.
    const VkDeviceSize align = std::max<VkDeviceSize>(limits.minStorageBufferOffsetAlignment, 16);
    VkDeviceSize cursor = 0;
    auto region = [&](VkDeviceSize bytes) {
        const BufferRange r{VK_NULL_HANDLE, cursor, bytes};
        cursor = alignUp(cursor + bytes, align);
        return r;
    };
    if (local_) {
        blockH_ = region(slots * F_ * (dv_ + 1) * 4);
        blockK_ = region(slots * b_ * h_ * 4);
        blockV_ = region(slots * b_ * dv_ * 4);
    }
    const VkDeviceSize stateEnd = cursor;
    const ForwardGeometry g1 = makeForwardGeometry(c, caps, batch_, 1, nullptr, nullptr, nullptr, nullptr);
    if (learned_) featureRows_ = region(forward_.workspace(g1).states.offset);
    workWord_ = cursor / 4;
    // The last word counts the steps executed (the state of a replayable decode reads it back).
    const uint64_t words = workWord_ + 2 * uint64_t(batch_) + slots + slots * slices_.groupsPerSlot() * stepShape.headRatio * (dv_ + 1) + 1;
    stepsWord_ = words - 1;
    checkBindingRange("step state (the unfinished block and the step's scratch)", words);
    stepState_ = deviceBuffer(words * 4);
    scratchBytes_ = words * 4 - stateEnd;
    for (BufferRange* r : {&blockH_, &blockK_, &blockV_, &featureRows_})
        if (r->size) r->buffer = stepState_.handle();

    kernel::DecodeOutputSpec spec;
    spec.WG = kDecodeWorkgroup;
    spec.SKETCH = R_;
    spec.HEAD_DIM = h_;
    spec.VALUE_DIM = dv_;
    spec.DEGREE = c.degree;
    spec.LOCAL_EXACT = local_ ? 1u : 0u;
    spec.BLOCK = local_ ? b_ : 1u;
    spec.HEAD_RATIO = stepShape.headRatio;
    spec.FEATURE_SLICE = slices_.featureSlice;
    spec.ROW_SLICE = slices_.rowSlice;
    spec.LEVELS = learned_ ? 1u : sketch.levels;
    step_ = kernelPipeline(context().pipelines(),
                           KernelChoice::make<KernelId::DecodeOutput>(learned_ ? "learned" : "random", c.dataType, spec,
                                              learned_ ? "polysketch decoding after the feature map: the token joins z, phi(q)^T z "
                                                         "(+ exact local part), normalized"
                                                       : "polysketch decoding: the token's sketch, the token joins z, phi(q)^T z "
                                                         "(+ exact local part), normalized"));

    // A new state is empty: z = 0. The block rows are zeroed too, so that a serialized blob
    // (which holds them in full) depends only on what the state consumed; the step's counters
    // and row counts start at zero.
    submitter_.run([&](Recorder& rec) {
        for (const Buffer* b : {&z_, &stepState_}) rec.fill({b->handle(), 0, b->size()}, b->size(), 0);
    });
}

uint64_t PolysketchDecoder::stateBytes() const {
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    uint64_t bytes = slots * F_ * (dv_ + 1) * 4;
    if (local_) bytes += slots * (uint64_t(F_) * (dv_ + 1) + uint64_t(b_) * (h_ + dv_)) * 4;
    return bytes;
}

void PolysketchDecoder::prefill(const PskDecodePrefillInfo& info, uint32_t count) {
    if (!info.out) {
        prefillStateOnly(info, count);
        return;
    }
    // The forward checks every pointer, size and value and writes `out` only when it succeeds.
    forwardPrompt(promptForwardInfo(info, count), info.firstSequence, true);
}

void PolysketchDecoder::forwardPrompt(const PskForwardHostInfo& info, uint32_t first, bool fresh) {
    // A prompt (or a chunk of one) is a forward with the state at a block boundary (p0 = 0, nothing
    // staged), so the state after it comes from the scan's tail as in state passing
    // (recordForward): with the continuation the scan runs even for a prompt of one block (it writes
    // Z_0 = z and the tail), so every prompt takes this path and no prefill folds its last block's
    // rows again (a fold over up to b rows, ~28 ms per prompt at b = 256, r = 32, dv = 64,
    // 4 heads on lavapipe; docs/PERFORMANCE.md). A fresh prompt's scan starts from z = 0 (the
    // prefill replaces the sequences' state); a later chunk's continues the earlier chunks' z.
    PskAttention_T::Override o;
    o.workspaceLayout = [this](const ForwardGeometry& g) { return stateForwardLayout(attention_, g, 0).layout; };
    o.record = [this, first, fresh](Recorder& rec, const BoundTensors& t) {
        if (fresh) {
            const VkDeviceSize bytes = VkDeviceSize(t.geometry.batch) * sequenceSumBytes();
            rec.fill({z_.handle(), VkDeviceSize(first) * sequenceSumBytes(), bytes}, bytes, 0);
        }
        // Position 0 or a multiple of b: only position % b matters to the forward.
        recordForward(rec, t, first, 0);
    };
    attention_.forwardHost(info, {}, &o);
}

void PolysketchDecoder::prefillStateOnly(const PskDecodePrefillInfo& info, uint32_t count) {
    // The forward over the whole prompt when one call can hold it, else over chunks of whole
    // blocks (a call's workspace must fit one storage-buffer binding: 64k tokens at b = 256,
    // r = 32, dv = 64, 4 heads exceed lavapipe's 128 MiB), each chunk continuing the state the
    // chunks before it left (at a block boundary: state passing without staged rows).
    const AttentionConfig& c = attention_.config();
    const DeviceCaps& caps = context().caps();
    const uint32_t n = info.seqLen;
    auto fits = [&](uint32_t len) {
        try {
            const ForwardGeometry g = makeForwardGeometry(c, caps, count, len, nullptr, nullptr, nullptr, nullptr);
            // Each region must fit one binding and, as the host forward splits the rest, one allocation.
            (void)attention_.hostPacking(stateForwardLayout(attention_, g, 0).layout);
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
    const size_t eb = storageBytes();
    const PskTensorStrides qS = defaultStrides(c.layout, Hq_, n, h_), kS = defaultStrides(c.layout, Hkv_, n, h_),
                           vS = defaultStrides(c.layout, Hkv_, n, dv_);
    for (uint32_t t0 = 0; t0 < n; t0 += chunk) {
        const uint32_t rows = std::min(chunk, n - t0);
        std::vector<uint8_t> q, k, v;
        PskForwardHostInfo fwd{};
        fwd.batchSize = count;
        fwd.seqLen = rows;
        if (rows == n) {
            fwd.q = info.q;
            fwd.k = info.k;
            fwd.v = info.v;
        } else {
            q = gatherTokens(info.q, qS, count, Hq_, t0, rows, h_, c.layout, eb);
            k = gatherTokens(info.k, kS, count, Hkv_, t0, rows, h_, c.layout, eb);
            v = gatherTokens(info.v, vS, count, Hkv_, t0, rows, dv_, c.layout, eb);
            fwd.q = q.data();
            fwd.k = k.data();
            fwd.v = v.data();
        }
        fwd.qBytes = size_t(count) * Hq_ * rows * h_ * eb;
        fwd.kBytes = size_t(count) * Hkv_ * rows * h_ * eb;
        fwd.vBytes = size_t(count) * Hkv_ * rows * dv_ * eb;
        std::vector<uint8_t> scratch(size_t(count) * Hq_ * rows * dv_ * eb);  // rows not wanted
        fwd.out = scratch.data();
        fwd.outBytes = scratch.size();
        forwardPrompt(fwd, info.firstSequence, t0 == 0);
    }
}

void PolysketchDecoder::recordStepFeatures(Recorder& rec, const StepTensors& t, const ForwardGeometry& g1,
                                           const PolysketchWorkspace& ws) {
    // The feature-map dispatches of recordPolysketch (forward/polysketch_forward.cpp) for n = 1, and
    // nothing else: the forward's block states, scan and output over the one token are not
    // needed. Same kernel, pipeline and parameters, so S(q), S(k), q', k' are the forward's bit
    // for bit. The step state holds the feature rows at their contiguous offsets and no block states.
    WorkspaceLayout layout = ws.layout(forward_.plan().regionAlignment);
    layout.regions[PolysketchWorkspace::States].size = 0;
    layout.regions[PolysketchWorkspace::ZOperands].size = 0;
    const FeatureMapRanges ranges = featureMapRanges(forward_.plan(), attention_.config(), bindContiguous(layout, featureRows_));
    recordFeatureMaps(rec, forward_.plan(), forward_.resources(), forward_.sketch(), attention_.config(), g1, t.q, t.k, ranges);
}

void PolysketchDecoder::recordStep(Recorder& rec, const StepTensors& t, const std::vector<uint64_t>&) {
    // The positions are not needed: sketched local weights do not depend on them, and in
    // local-exact mode the device keeps and advances the rows of each unfinished block.
    // One dispatch (decode_output.comp) reads q, k, v in the storage type, computes a random
    // sketch's S(q), S(k) (and q', k') of the token itself, adds the token to the state and writes
    // out in the storage type. A learned sketch's feature map (an MLP per row, too much work to
    // repeat in every workgroup of the step) runs first, as the forward's own dispatches.
    const uint32_t slots = batch_ * Hkv_;
    const AttentionConfig& c = attention_.config();
    const PackedSketch& sketch = forward_.sketch();
    StepPush push{};
    push.features = F_;
    push.q_heads = Hq_;
    push.kv_heads = Hkv_;
    push.batch = batch_;
    push.feature_groups = slices_.featureGroups;
    push.row_groups = slices_.rowGroups;
    push.work = uint32_t(workWord_);
    push.block_sum = uint32_t(blockH_.offset / 4);
    push.block_k = uint32_t(blockK_.offset / 4);
    push.block_v = uint32_t(blockV_.offset / 4);
    push.steps = uint32_t(stepsWord_);
    if (learned_) {
        const ForwardGeometry g1 = makeForwardGeometry(c, context().caps(), batch_, 1, nullptr, nullptr, nullptr, nullptr);
        const PolysketchWorkspace ws = forward_.workspace(g1);
        recordStepFeatures(rec, t, g1, ws);
        const VkDeviceSize base = featureRows_.offset;  // the forward's offsets are from the feature rows' start
        push.q_sketch = uint32_t((base + ws.qSketch.offset) / 4);
        push.k_sketch = uint32_t((base + ws.kSketch.offset) / 4);
        push.q_local = local_ ? uint32_t((base + ws.qLocal.offset) / 4) : 0;
        push.k_local = local_ ? uint32_t((base + ws.kLocal.offset) / 4) : 0;
    } else {
        push.scale = c.scale;
        push.node_scale = sketch.nodeScale;
        push.flags = (sketch.qkNorm ? kernel::DECODE_FLAG_QK_LN : 0) | (local_ && sketch.localNorm ? kernel::DECODE_FLAG_LOCAL_LN : 0);
        push.ln_scale = sketch.lnScale;
        push.ln_bias = sketch.lnBias;
        push.local_ln_scale = sketch.localLnScale;
        push.local_ln_bias = sketch.localLnBias;
        std::copy(sketch.offsets.begin(), sketch.offsets.begin() + 6, push.w);
    }
    kernel::DecodeOutputBindings b;
    b.STEP_STATE = BufferRange{stepState_.handle(), 0, stepState_.size()};
    b.Q_ROWS = t.q;
    b.K_ROWS = t.k;
    b.V_ROWS = t.v;
    b.WEIGHTS = forward_.resources().weights;
    b.PAIRS = forward_.resources().pairs;
    b.Z = BufferRange{z_.handle(), 0, z_.size()};
    b.OUT = t.out;
    recordKernel(rec, step_, b, push, slices_.groupsPerSlot(), slots);
}

void PolysketchDecoder::recordRowCounts(Recorder& rec, uint32_t first, const std::vector<uint64_t>& positions) const {
    if (!local_) return;
    for (size_t i = 0; i < positions.size();) {  // one fill per run of equal counts
        size_t j = i + 1;
        while (j < positions.size() && positions[j] % b_ == positions[i] % b_) ++j;
        const VkDeviceSize bytes = VkDeviceSize(j - i) * 4;
        rec.fill({stepState_.handle(), (workWord_ + first + i) * 4, bytes}, bytes, uint32_t(positions[i] % b_));
        i = j;
    }
}

std::vector<uint64_t> PolysketchDecoder::devicePositions(const std::vector<uint64_t>& positions, uint64_t* dropped) {
    // Every step advances every sequence by one: the host's positions plus the steps executed.
    Buffer host = hostBuffer(4, MemoryUsage::HostReadback);
    const BufferRange word{stepState_.handle(), stepsWord_ * 4, 4};
    submitter_.run([&](Recorder& rec) {
        rec.copy(word, {host.handle(), 0, 4}, 4);
        rec.fill(word, 4, 0);  // after the copy: the recorder orders the two (hazard tracking)
    });
    uint32_t steps = 0;
    std::memcpy(&steps, host.mapped(), 4);
    std::vector<uint64_t> out = positions;
    for (uint64_t& p : out) p += steps;
    *dropped = 0;
    return out;
}

void PolysketchDecoder::restorePositions(const std::vector<uint64_t>& positions) {
    if (local_) submitter_.run([&](Recorder& rec) { recordRowCounts(rec, 0, positions); });
}

void PolysketchDecoder::reset(uint32_t sequence) {
    const VkDeviceSize bytes = sequenceSumBytes();
    submitter_.run([&](Recorder& rec) {
        rec.fill({z_.handle(), sequence * bytes, bytes}, bytes, 0);
        if (local_) rec.fill({blockH_.buffer, blockH_.offset + sequence * bytes, bytes}, bytes, 0);
        recordRowCounts(rec, sequence, {0});
    });
}

void PolysketchDecoder::forEachBlobRegion(const std::vector<uint64_t>&, const std::function<void(const BufferRange&)>& region) const {
    // The whole state, whatever the positions: z, then (local exact) h, the block's k' and v rows.
    const uint64_t slots = uint64_t(batch_) * Hkv_;
    region({z_.handle(), 0, slots * F_ * (dv_ + 1) * 4});
    if (local_) {
        region(blockH_);
        region(blockK_);
        region(blockV_);
    }
}

// ---- State passing: a forward that continues the state (docs/DECODING.md, "State passing") ----

StateForwardLayout stateForwardLayout(const PskAttention_T& attention, const ForwardGeometry& call, uint32_t p0) {
    const AttentionConfig& c = attention.config();
    const PolysketchForward& forward = *attention.polysketch();
    const PolysketchPlan& plan = forward.plan();
    const DeviceCaps& caps = attention.context()->caps();
    const uint32_t count = call.batch, n = call.tokens;
    StateForwardLayout L;
    L.p0 = p0;
    L.staged = p0 > 0;
    L.m = n + p0;
    if (L.m < n) fail(PSK_ERROR_TOO_LARGE, "seqLen ", n, " plus the unfinished block's rows overflows");
    using SL = StateForwardLayout;
    L.layout.alignment = plan.regionAlignment;
    L.layout.regions.resize(SL::RegionCount);
    L.layout.regions[SL::Q].name = "staged q rows";
    L.layout.regions[SL::K].name = "staged k rows";
    L.layout.regions[SL::V].name = "staged v rows";
    L.layout.regions[SL::Out].name = "staged output rows";
    if (L.staged) {
        // Dense BHND tensors of m rows: the state's p0 rows, then the call's n rows.
        const PskTensorStrides qs = defaultStrides(PSK_LAYOUT_BHND, c.numQueryHeads, L.m, c.headDim),
                               ks = defaultStrides(PSK_LAYOUT_BHND, c.numKeyValueHeads, L.m, c.headDim),
                               vs = defaultStrides(PSK_LAYOUT_BHND, c.numKeyValueHeads, L.m, c.valueDim),
                               os = defaultStrides(PSK_LAYOUT_BHND, c.numQueryHeads, L.m, c.valueDim);
        L.geometry = makeForwardGeometry(c, caps, count, L.m, &qs, &ks, &vs, &os);
        const size_t eb = elementBytes(c.dataType);
        L.layout.regions[SL::Q].size = L.geometry.q.extentElements() * eb;
        L.layout.regions[SL::K].size = L.geometry.k.extentElements() * eb;
        L.layout.regions[SL::V].size = L.geometry.v.extentElements() * eb;
        L.layout.regions[SL::Out].size = L.geometry.out.extentElements() * eb;
    } else {
        L.geometry = call;
    }
    L.ws = forward.workspace(L.geometry);
    checkPolysketchDispatch(plan, c, L.geometry);
    const WorkspaceLayout own = L.ws.layout(plan.regionAlignment);
    std::copy(own.regions.begin(), own.regions.end(), L.layout.regions.begin() + SL::Forward);
    // The scan's tail: z after the call, and (local exact, the last block unfinished) its h.
    L.layout.regions[SL::Tail] = {"state sums after the call",
                                  (c.localExact ? 2 : 1) * uint64_t(count) * c.numKeyValueHeads * plan.features * plan.stateStride * 4};
    for (size_t i : {SL::Q, SL::K, SL::V, SL::Out, SL::Tail})
        if (L.layout.regions[i].size > plan.maxRange)
            fail(PSK_ERROR_TOO_LARGE, "a forward with a decode state needs ", L.layout.regions[i].size, " bytes in one staging region (",
                 L.layout.regions[i].name, "), more than one storage buffer binding can address (", plan.maxRange, ")");
    return L;
}

WorkspaceLayout polysketchStateForwardWorkspaceLayout(const PskAttention_T& attention, const ForwardGeometry& call) {
    const AttentionConfig& c = attention.config();
    // The largest workspace is a call behind b - 1 rows of an unfinished block (local exact);
    // every region is at least as large as at any smaller p0, so it serves every position.
    const uint32_t b = attention.polysketch()->plan().blockSize;
    return stateForwardLayout(attention, call, c.localExact ? b - 1 : 0).layout;
}

void PolysketchDecoder::checkForward(uint64_t position, uint32_t n) const {
    if (position + n > kMaxPolysketchPosition)
        fail(PSK_ERROR_TOO_LARGE, "the sequences are at position ", position, "; ", n,
             " more tokens pass the limit 2^53 of a POLYSKETCH sequence");
}

void PolysketchDecoder::recordForward(Recorder& rec, const BoundTensors& t, uint32_t first, uint64_t position) {
    // The forward's scan starts from the state's z; in local-exact mode a call that starts inside
    // a block runs behind that block's p0 rows (staged), so that its blocks are the sequence's:
    // the rows' k' and v come from the state, their S(k) are zeroed (their sum is h, which the
    // scan adds to block 0) and their q and output rows are ignored. Afterwards the state is the
    // forward's Z_{t-1} plus its last block, which the scan writes out as it goes (its tail), so
    // the update is a copy of F rows of dv + 1 floats per head (plus the unfinished block's rows).
    // Folding the last block's rows again (a fold over up to b rows) cost ~30 ms per call
    // at b = 256, r = 32, dv = 64, 4 heads on lavapipe (4 calls of 4096 tokens: 1.30x one call,
    // with the tail 1.02x; docs/PERFORMANCE.md). A prefill takes this path too (forwardPrompt).
    const AttentionConfig& c = attention_.config();
    const uint32_t count = t.geometry.batch, n = t.geometry.tokens;
    const uint32_t p0 = local_ ? uint32_t(position % b_) : 0;
    const StateForwardLayout L = stateForwardLayout(attention_, t.geometry, p0);
    const uint32_t s0 = first * Hkv_, slots = count * Hkv_, m = L.m;
    // Local exact with the last block unfinished: z takes Z_{t-1} and h the block's own sum (its
    // rows stay for the exact local part); otherwise z takes every block and h is empty.
    const uint32_t lastBegin = (L.ws.blocks - 1) * b_, lastRows = m - lastBegin;
    const bool keepRows = local_ && lastRows < b_;
    // t.workspace binds the regions of the largest p0 (polysketchStateForwardWorkspaceLayout), each
    // at least as large as this call's.
    if (t.workspace.size() != StateForwardLayout::RegionCount) fail(PSK_ERROR_INTERNAL, "state forward workspace regions not bound");
    auto at = [&](size_t region) { return t.workspace[region]; };
    const size_t eb = elementBytes(c.dataType);
    // Timed stages (PskForwardStats): the staging counts as feature map (the forward's own mark
    // for it is then ignored), the state's update after the output as output.
    rec.beginStage(PSK_FORWARD_STAGE_FEATURE_MAP);

    PolysketchContinuation cont;
    cont.initial.z = {z_.handle(), 0, z_.size()};
    cont.initial.h = local_ ? blockH_ : cont.initial.z;
    cont.initial.row = dv_ + 1;
    cont.initial.stride = forward_.plan().stateStride;
    cont.initial.base = s0 * F_ * (dv_ + 1);
    cont.initial.addH = L.staged;
    cont.initial.tailMode = keepRows ? ScanInitial::Tail::Split : ScanInitial::Tail::Total;
    cont.initial.tail = at(StateForwardLayout::Tail);
    BoundTensors fwd{t.q, t.k, t.v, t.out, L.geometry, t.workspace.slice(StateForwardLayout::Forward, PolysketchWorkspace::RegionCount)};
    const PskTensorStrides dense[4] = {L.geometry.q.strides, L.geometry.k.strides, L.geometry.v.strides, L.geometry.out.strides};
    if (L.staged) {
        fwd.q = at(StateForwardLayout::Q);
        fwd.k = at(StateForwardLayout::K);
        fwd.v = at(StateForwardLayout::V);
        fwd.out = at(StateForwardLayout::Out);
        // Rows [0, p0): q and k zero (their features are discarded or replaced), v the state's.
        for (uint32_t i = 0; i < count * Hq_; ++i)
            rec.fill({fwd.q.buffer, fwd.q.offset + VkDeviceSize(i) * m * h_ * eb, VkDeviceSize(p0) * h_ * eb}, VkDeviceSize(p0) * h_ * eb, 0);
        for (uint32_t i = 0; i < slots; ++i) {
            rec.fill({fwd.k.buffer, fwd.k.offset + VkDeviceSize(i) * m * h_ * eb, VkDeviceSize(p0) * h_ * eb}, VkDeviceSize(p0) * h_ * eb, 0);
            if (eb == 4)
                rec.copy({blockV_.buffer, blockV_.offset + VkDeviceSize(s0 + i) * b_ * dv_ * 4, VkDeviceSize(p0) * dv_ * 4},
                         {fwd.v.buffer, fwd.v.offset + VkDeviceSize(i) * m * dv_ * eb, VkDeviceSize(p0) * dv_ * eb}, VkDeviceSize(p0) * dv_ * 4);
        }
        // A 16-bit attention: the state's float32 v rows go into the staged tensor rounded to the
        // storage type (they were converted exactly from it when they entered the state).
        if (eb != 4)
            recordCopyRows(rec, {blockV_, uint64_t(s0) * b_ * dv_, {Hkv_ * b_ * dv_, b_ * dv_, dv_}},
                           {fwd.v, 0, dense[2]}, count, Hkv_, p0, dv_, RowConvert::FromF32);
        // Rows [p0, m): the call's.
        const Decoder::RowTensor from[3] = {{t.q, 0, t.geometry.q.strides}, {t.k, 0, t.geometry.k.strides}, {t.v, 0, t.geometry.v.strides}};
        const BufferRange to[3] = {fwd.q, fwd.k, fwd.v};
        const uint32_t heads[3] = {Hq_, Hkv_, Hkv_}, dims[3] = {h_, h_, dv_};
        for (int i = 0; i < 3; ++i)
            recordCopyRows(rec, from[i], {to[i], uint64_t(p0) * dense[i].token, dense[i]}, count, heads[i], n, dims[i]);
        // After the feature maps: the unfinished block's rows get S(k) = 0 and the state's k'.
        cont.afterFeatureMaps = [&](Recorder& r, const FeatureMapRanges& f) {
            for (uint32_t i = 0; i < slots; ++i) {
                const VkDeviceSize sBytes = VkDeviceSize(p0) * R_ * 4, kBytes = VkDeviceSize(p0) * h_ * 4;
                r.fill({f.kSketch.buffer, f.kSketch.offset + VkDeviceSize(i) * m * R_ * 4, sBytes}, sBytes, 0);
                r.copy({blockK_.buffer, blockK_.offset + VkDeviceSize(s0 + i) * b_ * h_ * 4, kBytes},
                       {f.kLocal.buffer, f.kLocal.offset + VkDeviceSize(i) * m * h_ * 4, kBytes}, kBytes);
            }
        };
    }
    forward_.record(rec, fwd, cont);
    if (L.staged)
        recordCopyRows(rec, {fwd.out, uint64_t(p0) * dense[3].token, dense[3]}, {t.out, 0, t.geometry.out.strides}, count, Hq_, n, dv_);

    // The state after the call, from the scan's tail (the states' padded rows, the call's slots
    // dense): z, and h (local exact), for slots s0.. of the state, F rows of dv + 1 floats each.
    const BufferRange tail = at(StateForwardLayout::Tail);
    const VkDeviceSize zBytes = VkDeviceSize(F_) * (dv_ + 1) * 4, stateRow = VkDeviceSize(forward_.plan().stateStride) * 4;
    const VkDeviceSize part = VkDeviceSize(slots) * F_ * stateRow;  // one part of the tail
    auto copyPart = [&](VkDeviceSize from, const BufferRange& to) {
        for (uint32_t i = 0; i < slots; ++i)
            rec.copyRows({tail.buffer, tail.offset + from + i * F_ * stateRow, F_ * stateRow}, stateRow,
                         {to.buffer, to.offset + VkDeviceSize(s0 + i) * zBytes, zBytes}, (dv_ + 1) * 4, (dv_ + 1) * 4, F_);
    };
    copyPart(0, {z_.handle(), 0, z_.size()});
    if (keepRows) {
        copyPart(part, blockH_);
        // The unfinished block's k' and v rows stay for the exact local part (v as float32,
        // converted exactly from a 16-bit storage type).
        const BufferRange kLocal = fwd.workspace[PolysketchWorkspace::KLocal];
        const VkDeviceSize kBytes = VkDeviceSize(lastRows) * h_ * 4;
        for (uint32_t i = 0; i < slots; ++i)
            rec.copy({kLocal.buffer, kLocal.offset + (VkDeviceSize(i) * m + lastBegin) * h_ * 4, kBytes},
                     {blockK_.buffer, blockK_.offset + VkDeviceSize(s0 + i) * b_ * h_ * 4, kBytes}, kBytes);
        recordCopyRows(rec, {fwd.v, uint64_t(lastBegin) * L.geometry.v.strides.token, L.geometry.v.strides},
                       {blockV_, uint64_t(s0) * b_ * dv_, {Hkv_ * b_ * dv_, b_ * dv_, dv_}}, count, Hkv_,
                       lastRows, dv_, RowConvert::ToF32);
    } else if (local_) {
        rec.fill({blockH_.buffer, blockH_.offset + VkDeviceSize(s0) * zBytes, VkDeviceSize(slots) * zBytes}, VkDeviceSize(slots) * zBytes, 0);
    }
    // The steps that follow start at row (position + n) % b of the unfinished block.
    recordRowCounts(rec, first, std::vector<uint64_t>(count, position + n));
}

}  // namespace psk
