#include "forward/polysketch_forward.hpp"
#include "kernels/kernel_pipeline.hpp"

#include "forward/coopmat_switches.hpp"

#include <algorithm>
#include <cstring>

#include "forward/block_scan.hpp"
#include "sketch/sketch_weights.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"
#include "vk/context.hpp"

namespace psk {

PolysketchWorkspace polysketchWorkspace(const PolysketchPlan& plan, const AttentionConfig& c, const ForwardGeometry& g) {
    PolysketchWorkspace ws;
    ws.blocks = ceilDiv(g.tokens, plan.blockSize);
    const uint64_t n = g.tokens, B = g.batch;
    const uint64_t limit32 = uint64_t(1) << 32;
    VkDeviceSize cursor = 0;
    auto region = [&](const char* name, uint64_t floats) {
        PolysketchWorkspace::Region r;
        if (floats == 0) return r;
        if (floats >= limit32 || floats * 4 > plan.maxRange)
            fail(PSK_ERROR_TOO_LARGE, "polysketch ", name, " needs ", floats * 4,
                 " bytes, more than one storage buffer binding can address (", plan.maxRange,
                 "); use a smaller batch or fewer tokens per call",
                 name[0] == 's'   ? ", or a larger block size"
                 : name[0] == 'z' ? ", or a larger block size, or Z staged by the output (PSK_COOPMAT_Z_PACKED=off)"
                                  : "");
        r.offset = cursor;
        r.size = floats * 4;
        cursor = alignUp(cursor + r.size, plan.regionAlignment);
        return r;
    };
    const uint64_t R = plan.sketchLength;
    // plan.fusedQuery: the output computes the query side itself; no q rows are stored.
    const uint64_t qRows = plan.fusedQuery ? 0 : B * c.numQueryHeads * n;
    ws.qSketch = region("q sketches", qRows * R);
    ws.kSketch = region("k sketches", B * c.numKeyValueHeads * n * R);
    if (c.causal && c.localExact) {
        ws.qLocal = region("local q rows", qRows * c.headDim);
        ws.kLocal = region("local k rows", B * c.numKeyValueHeads * n * c.headDim);
    }
    if (plan.nodeScratch) {
        ws.qNodes = region("q sketch nodes", B * c.numQueryHeads * n * 2 * R);
        ws.kNodes = region("k sketch nodes", B * c.numKeyValueHeads * n * 2 * R);
    }
    ws.states = region("states", B * c.numKeyValueHeads * ws.blocks * uint64_t(plan.features) * plan.stateStride);
    if (!plan.zOperands.kernel.empty())  // 16-byte records: 4 floats each, as region() counts
        ws.zOperands = region("z operands", zOperandsBytes(plan.zOperands, plan.features, B * c.numKeyValueHeads, c.causal ? ws.blocks : 1) / 4);
    ws.total = cursor;
    return ws;
}

WorkspaceLayout PolysketchWorkspace::layout(VkDeviceSize alignment) const {
    WorkspaceLayout L;
    L.alignment = alignment;
    L.regions = {{"q sketches", qSketch.size}, {"k sketches", kSketch.size}, {"local q rows", qLocal.size},
                 {"local k rows", kLocal.size}, {"q sketch nodes", qNodes.size}, {"k sketch nodes", kNodes.size},
                 {"states", states.size}, {"z operands", zOperands.size}};
    return L;
}

void recordSelfTensor(Recorder& rec, VkPipeline pipeline, const DeviceCaps& caps, BufferRange sketches, BufferRange pairs,
                      BufferRange features, uint32_t rows, uint32_t sketchLength) {
    const uint32_t F = sketchLength * (sketchLength + 1) / 2;
    const uint32_t maxY = caps.limits().maxComputeWorkGroupCount[1], maxZ = caps.limits().maxComputeWorkGroupCount[2];
    const uint32_t rowsY = std::min(rows, maxY);
    const uint32_t rowsZ = ceilDiv(rows, rowsY);
    if (rowsZ > maxZ || uint64_t(rows) * F >= (uint64_t(1) << 32)) fail(PSK_ERROR_TOO_LARGE, "too many feature rows");
    const kernel::SelfTensorPush push{rows, sketchLength, F, rowsY};
    kernel::SelfTensorBindings b;
    b.SKETCHES = sketches;
    b.PAIRS = pairs;
    b.FEATURES = features;
    recordKernel(rec, KernelPipeline{pipeline, KernelId::SelfTensor}, b, push, ceilDiv(F, 64), rowsY, rowsZ);
}

FeatureMapRanges featureMapRanges(const PolysketchPlan& plan, const AttentionConfig& c, const BoundWorkspace& w) {
    using W = PolysketchWorkspace;
    FeatureMapRanges f;
    f.kSketch = w[W::KSketch];
    // Bindings the kernel does not write still need a valid range: the sketch rows stand in (the
    // k rows for the query side's where the plan stores none: plan.fusedQuery, read by no kernel).
    f.qSketch = plan.fusedQuery ? f.kSketch : w[W::QSketch];
    const bool local = c.causal && c.localExact;
    f.kLocal = local ? w[W::KLocal] : f.kSketch;
    f.qLocal = !local ? f.qSketch : plan.fusedQuery ? f.kLocal : w[W::QLocal];
    f.qNodes = plan.nodeScratch ? w[W::QNodes] : f.qSketch;
    f.kNodes = plan.nodeScratch ? w[W::KNodes] : f.kSketch;
    return f;
}

void recordFeatureMaps(Recorder& rec, const PolysketchPlan& plan, const PolysketchResources& res, const PackedSketch& sketch,
                       const AttentionConfig& c, const ForwardGeometry& g, BufferRange q, BufferRange k, const FeatureMapRanges& f) {
    const bool local = c.causal && c.localExact;
    const uint32_t groups = ceilDiv(g.tokens, plan.featureRows);
    kernel::SketchFeaturesPush fp{};
    fp.n = g.tokens;
    fp.node_scale = sketch.nodeScale;
    fp.flags = (sketch.qkNorm ? kernel::FLAG_QK_LN : 0) | (local ? kernel::FLAG_WRITE_LOCAL : 0) |
               (local && sketch.localNorm ? kernel::FLAG_LOCAL_LN : 0);
    fp.ln_scale = sketch.lnScale;
    fp.ln_bias = sketch.lnBias;
    fp.local_ln_scale = sketch.localLnScale;
    fp.local_ln_bias = sketch.localLnBias;
    std::copy(sketch.offsets.begin(), sketch.offsets.end(), fp.w);
    // The team kernel's vec4-row variant where the strides allow it.
    auto pipeline = [&](const PskTensorStrides& st) -> const KernelPipeline& {
        return alignedRows(st, plan.featureVecRowFloats) && res.featuresVec ? res.featuresVec : res.features;
    };
    // Bindings a configuration does not use get the sketch rows (featureMapRanges): written anyway.
    auto side = [&](uint32_t heads, float scale, const TensorGeometry& x, BufferRange rows, BufferRange sketchOut,
                    BufferRange localOut, BufferRange nodes) {
        fp.heads = heads;
        fp.scale = scale;
        fp.x_strides = kernel::pushStrides(x.strides);
        kernel::SketchFeaturesBindings b;
        b.WEIGHTS = res.weights;
        b.X_ROWS = rows;
        b.SKETCH_OUT = sketchOut;
        b.LOCAL_OUT = localOut;
        b.NODES = nodes;
        recordKernel(rec, pipeline(x.strides), b, fp, groups, heads, g.batch);
    };
    // plan.fusedQuery: the cooperative output computes the query side from q itself.
    if (!plan.fusedQuery) side(c.numQueryHeads, c.scale, g.q, q, f.qSketch, f.qLocal, f.qNodes);
    side(c.numKeyValueHeads, 1.0f, g.k, k, f.kSketch, f.kLocal, f.kNodes);  // k is never scaled
}

void checkPolysketchDispatch(const PolysketchPlan& plan, const AttentionConfig& c, const ForwardGeometry& g) {
    const PolysketchWorkspace ws = polysketchWorkspace(plan, c, g);
    const uint32_t featureGroups = ceilDiv(g.tokens, plan.featureRows);
    const uint32_t featureTiles = ceilDiv(plan.features, plan.statesTileF);
    const uint32_t colTiles = ceilDiv(c.valueDim, plan.statesTileC);
    const uint64_t outputGroups = uint64_t(ws.blocks) * ceilDiv(plan.blockSize, plan.outputRows);
    const uint32_t kvSequences = g.batch * c.numKeyValueHeads;
    if (featureGroups > plan.maxGroups[0] || outputGroups > plan.maxGroups[0] ||
        uint64_t(featureTiles) * colTiles > plan.maxGroups[0])
        fail(PSK_ERROR_TOO_LARGE, "seqLen ", g.tokens, " needs more workgroups than the device allows (",
             plan.maxGroups[0], " along x)");
    if (ws.blocks > plan.maxGroups[1])
        fail(PSK_ERROR_TOO_LARGE, "seqLen ", g.tokens, " makes ", ws.blocks, " blocks; the device allows ",
             plan.maxGroups[1], "; use a larger block size");
    if (kvSequences > plan.maxGroups[2])
        fail(PSK_ERROR_TOO_LARGE, "batchSize x numKeyValueHeads = ", kvSequences, " exceeds the device's dispatch limit ",
             plan.maxGroups[2]);
}

void recordPolysketch(Recorder& rec, Pipelines& pipelines, const DeviceCaps& caps, const PolysketchPlan& plan,
                      const PolysketchResources& res, const PackedSketch& sketch, const AttentionConfig& c,
                      const BoundTensors& t, const PolysketchContinuation* cont) {
    const ForwardGeometry& g = t.geometry;
    const PolysketchWorkspace ws = polysketchWorkspace(plan, c, g);
    // Every region through its own range: the regions may live in different buffers.
    if (t.workspace.size() != PolysketchWorkspace::RegionCount) fail(PSK_ERROR_INTERNAL, "polysketch workspace regions not bound");
    const FeatureMapRanges f = featureMapRanges(plan, c, t.workspace);
    const BufferRange states = t.workspace[PolysketchWorkspace::States];
    const bool local = c.causal && c.localExact;
    if (cont && !c.causal) fail(PSK_ERROR_INTERNAL, "a forward continuing a decode state is causal");

    // Dispatch limits, checked before anything is recorded.
    checkPolysketchDispatch(plan, c, g);
    const uint32_t featureTiles = ceilDiv(plan.features, plan.statesTileF);
    const uint32_t colTiles = ceilDiv(c.valueDim, plan.statesTileC);
    const uint32_t tilesPerBlock = ceilDiv(plan.blockSize, plan.outputRows);
    const uint64_t outputGroups = uint64_t(ws.blocks) * tilesPerBlock;
    const uint32_t kvSequences = g.batch * c.numKeyValueHeads;

    // 1. Feature map of q and of k (independent: no barrier between them).
    rec.beginStage(PSK_FORWARD_STAGE_FEATURE_MAP);
    // The workspace as a GPU may hand it over (PolysketchPlan::poisonWorkspace): NaN everywhere.
    // Inside the first stage, so that the stage times still add up to the call's.
    if (plan.poisonWorkspace)
        for (size_t i = 0; i < t.workspace.size(); ++i)
            if (t.workspace[i].buffer != VK_NULL_HANDLE && t.workspace[i].size >= 4)
                rec.fill(t.workspace[i], fillableBytes(t.workspace[i]), kWorkspacePoisonBits);
    recordFeatureMaps(rec, plan, res, sketch, c, g, t.q, t.k, f);
    // A broken cooperative kernel on purpose (PSK_COOPMAT_FAULT, tests of the self-test): its
    // result replaced by infinities, as the first GPU run saw from a wrong kernel.
    constexpr uint32_t kInfinityBits = 0x7F800000u;
    if (plan.faultStages & kCoopFeatures) {
        rec.fill(f.kSketch, fillableBytes(f.kSketch), kInfinityBits);
        if (!plan.fusedQuery) rec.fill(f.qSketch, fillableBytes(f.qSketch), kInfinityBits);
    }
    if (cont && cont->afterFeatureMaps) cont->afterFeatureMaps(rec, f);

    // 2. Block states H_l = phi(K_l)^T [V_l | 1].
    rec.beginStage(PSK_FORWARD_STAGE_BLOCK_STATES);
    kernel::BlockStatesPush sp{};
    sp.n = g.tokens;
    sp.block_size = plan.blockSize;
    sp.blocks = ws.blocks;
    sp.features = plan.features;
    sp.kv_heads = c.numKeyValueHeads;
    sp.feature_tiles = featureTiles;
    sp.v_strides = kernel::pushStrides(g.v.strides);
    // The cooperative variant takes the same push constants (and finds its operand scales itself).
    // Its walking variant writes the prefix (or the sum) itself: see PolysketchPlan::statesWalkKernel.
    const bool walk = res.statesWalk && !cont && ws.blocks <= plan.statesWalkMaxBlocks &&
                      uint64_t(featureTiles) * colTiles * kvSequences >= plan.statesWalkMinGroups;
    kernel::BlockStatesBindings sb;
    sb.K_SKETCH = f.kSketch;
    sb.V = t.v;
    sb.PAIRS = res.pairs;
    sb.STATES = states;
    recordKernel(rec, walk ? res.statesWalk : res.states, sb, sp, featureTiles * colTiles, walk ? 1u : ws.blocks, kvSequences);
    if (plan.faultStages & kCoopStates) rec.fill(states, fillableBytes(states), kInfinityBits);

    // 3. Causal: exclusive prefix over blocks (Blelloch); full: one sum of every block. Where the
    // output reads packed Z and enough workgroups stream at once, the packing's walking form takes
    // the prefix and packs in one pass instead (no float32 prefix written; ZOperandsPlan::walkKernel).
    rec.beginStage(PSK_FORWARD_STAGE_PREFIX);
    const uint32_t elems = plan.features * plan.stateStride;
    const bool packWalk = !walk && c.causal && !cont && res.zOperandsWalk && ws.blocks <= plan.zOperands.walkMaxBlocks &&
                          zOperandsWalkGroups(plan.zOperands, plan.features, kvSequences) >= plan.zOperands.walkMinGroups;
    if (walk) {
        // Done by the walk.
    } else if (packWalk) {
        recordZOperandsWalk(rec, res.zOperandsWalk, plan.zOperands, states, t.workspace[PolysketchWorkspace::ZOperands], kvSequences,
                            ws.blocks, plan.features);
    } else if (c.causal) {
        const BlockScanPlan scan = planBlockScan(ws.blocks, caps);
        recordBlockScan(rec, kernelPipeline(pipelines, scan.kernel), scan, states, kvSequences, ws.blocks, elems, cont ? &cont->initial : nullptr);
    } else {
        const BlockScanPlan reduce = planBlockReduce(ws.blocks, caps);
        recordBlockReduce(rec, kernelPipeline(pipelines, reduce.kernel), reduce, states, kvSequences, ws.blocks, elems);
    }

    // 4. Output: phi(q)^T Z + local part, normalized. The cooperative output's Z_PACKED: Z packed
    // into its operands first, once per block (counted in the output's stage: it is the output's
    // staging, done once), and the output reads the records instead of the states.
    rec.beginStage(PSK_FORWARD_STAGE_OUTPUT);
    BufferRange zForOutput = states;
    if (!plan.zOperands.kernel.empty()) {
        zForOutput = t.workspace[PolysketchWorkspace::ZOperands];
        if (!packWalk)
            recordZOperands(rec, res.zOperands, plan.zOperands, states, zForOutput, kvSequences, ws.blocks, c.causal ? ws.blocks : 1,
                            plan.features);
    }
    kernel::PolysketchOutputPush op{};
    op.n = g.tokens;
    op.block_size = plan.blockSize;
    op.blocks = ws.blocks;
    op.features = plan.features;
    op.head_ratio = c.numQueryHeads / c.numKeyValueHeads;
    op.q_heads = c.numQueryHeads;
    op.kv_heads = c.numKeyValueHeads;
    op.tiles_per_block = tilesPerBlock;
    op.v_strides = kernel::pushStrides(g.v.strides);
    op.o_strides = kernel::pushStrides(g.out.strides);
    op.prefix_first = cont ? 1u : 0u;
    // The cooperative output's FUSED_QUERY (plan.fusedQuery): S(q) = c (s q G_a) * (s q G_b), or s q.
    op.q_strides = kernel::pushStrides(g.q.strides);
    op.scale = c.scale;
    op.node_scale = sketch.nodeScale;
    op.w_a = sketch.offsets[0];
    op.w_b = sketch.offsets[1];
    op.ln_scale = sketch.lnScale;
    op.ln_bias = sketch.lnBias;
    op.local_ln_scale = sketch.localLnScale;
    op.local_ln_bias = sketch.localLnBias;
    // Every output variant takes these push constants and this grid: plan.outputRows rows per
    // workgroup (the cooperative kernel's TILE_M = SG_M * CM_M); only the team kernel has a vec variant.
    kernel::PolysketchOutputBindings ob;
    // plan.fusedQuery: the cooperative output reads q and the packed sketch through these two.
    ob.Q_SKETCH = plan.fusedQuery ? t.q : f.qSketch;
    ob.K_LOCAL = local ? f.kLocal : f.kSketch;
    ob.V = t.v;
    ob.OUT = t.out;
    ob.STATES = zForOutput;
    ob.PAIRS = res.pairs;
    ob.Q_LOCAL = plan.fusedQuery ? res.weights : f.qLocal;
    recordKernel(rec, alignedRows(g.v.strides, plan.outputVecRowFloats) && res.outputVec ? res.outputVec : res.output, ob, op,
                 static_cast<uint32_t>(outputGroups), c.numQueryHeads, g.batch);
    if (plan.faultStages & kCoopOutput) rec.fill(t.out, fillableBytes(t.out), kInfinityBits);
}

PolysketchForward::PolysketchForward(PskContext_T* context, const AttentionConfig& c, std::shared_ptr<const PackedSketch> sketch,
                                     const TuningSelection& tuning)
    : context_(context), config_(c), sketch_(std::move(sketch)) {
    if (!sketch_) fail(PSK_ERROR_INTERNAL, "a polysketch forward without its sketch");
    const DeviceCaps& caps = context_->caps();
    plan_ = planPolysketch(c, *sketch_, caps, &tuning);
    Pipelines& pipelines = context_->pipelines();
    resources_.features = kernelPipeline(pipelines, plan_.featureKernel);
    resources_.states = kernelPipeline(pipelines, plan_.statesKernel);
    if (!plan_.statesWalkKernel.empty()) resources_.statesWalk = kernelPipeline(pipelines, plan_.statesWalkKernel);
    if (!plan_.zOperands.kernel.empty()) resources_.zOperands = kernelPipeline(pipelines, plan_.zOperands.kernel);
    if (!plan_.zOperands.walkKernel.empty()) resources_.zOperandsWalk = kernelPipeline(pipelines, plan_.zOperands.walkKernel);
    resources_.output = kernelPipeline(pipelines, plan_.outputKernel);
    if (!plan_.featureKernelVec.empty()) resources_.featuresVec = kernelPipeline(pipelines, plan_.featureKernelVec);
    if (!plan_.outputKernelVec.empty()) resources_.outputVec = kernelPipeline(pipelines, plan_.outputKernelVec);
    // Every scan (causal) or reduction (full) variant a call may pick, by number of blocks.
    for (const BlockScanPlan& p : allBlockScanPlans(c.causal, caps)) kernelPipeline(pipelines, p.kernel);
    weights_ = uploadConstant(sketch_->data.data(), sketch_->data.size() * sizeof(float));
    const std::vector<uint32_t> pairs = selfTensorPairs(sketch_->sketchLength);
    pairs_ = uploadConstant(pairs.data(), pairs.size() * sizeof(uint32_t));
    resources_.weights = {weights_.handle(), 0, weights_.size()};
    resources_.pairs = {pairs_.handle(), 0, pairs_.size()};
}

Buffer PolysketchForward::uploadConstant(const void* data, VkDeviceSize bytes) {
    const VkBufferUsageFlags flags = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
    Buffer buffer(context_->allocator(), bytes, flags, MemoryUsage::DeviceLocal);
    if (buffer.mapped()) {
        std::memcpy(buffer.mapped(), data, bytes);
        return buffer;
    }
    Buffer staging(context_->allocator(), bytes, VK_BUFFER_USAGE_TRANSFER_SRC_BIT, MemoryUsage::HostUpload);
    std::memcpy(staging.mapped(), data, bytes);
    context_->execute([&](Recorder& rec) { rec.copy({staging.handle(), 0, bytes}, {buffer.handle(), 0, bytes}, bytes); });
    return buffer;
}


std::vector<KernelChoice> PolysketchForward::kernels() const {
    std::vector<KernelChoice> k{plan_.featureKernel};
    if (!plan_.featureKernelVec.empty()) k.push_back(plan_.featureKernelVec);
    k.push_back(plan_.statesKernel);
    if (!plan_.statesWalkKernel.empty()) k.push_back(plan_.statesWalkKernel);
    // The prefix kernel depends on the number of blocks: every variant a call may pick.
    for (const BlockScanPlan& p : allBlockScanPlans(config_.causal, context_->caps())) k.push_back(p.kernel);
    if (!plan_.zOperands.kernel.empty()) k.push_back(plan_.zOperands.kernel);
    if (!plan_.zOperands.walkKernel.empty()) k.push_back(plan_.zOperands.walkKernel);
    k.push_back(plan_.outputKernel);
    if (!plan_.outputKernelVec.empty()) k.push_back(plan_.outputKernelVec);
    return k;
}

void PolysketchForward::record(Recorder& recorder, const BoundTensors& tensors) const {
    recordPolysketch(recorder, context_->pipelines(), context_->caps(), plan_, resources_, *sketch_, config_, tensors);
}

void PolysketchForward::record(Recorder& recorder, const BoundTensors& tensors, const PolysketchContinuation& continuation) const {
    recordPolysketch(recorder, context_->pipelines(), context_->caps(), plan_, resources_, *sketch_, config_, tensors, &continuation);
}

KernelChoice selfTensorKernel() {
    return KernelChoice::make<KernelId::SelfTensor>("", PSK_DATA_TYPE_FLOAT32, kernel::NoSpec{}, "tests and tools");
}

}  // namespace psk
