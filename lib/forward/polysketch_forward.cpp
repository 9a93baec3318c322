#include <algorithm>

#include "util/error.hpp"
#include "forward/kernels.hpp"
#include "kernels/shader_registry.hpp"
#include "kernels/team_kernels.hpp"

namespace psk {

namespace {

// Mirrors the push constants of shaders/sketch_features.comp.
struct FeaturePush {
    uint32_t n;
    uint32_t heads;
    float scale;
    uint32_t flags;
    uint32_t strides[3];
    float nodeScale;
    uint32_t lnScale, lnBias, localLnScale, localLnBias;
    uint32_t w[16];
};
constexpr uint32_t kFlagQkNorm = 1, kFlagWriteLocal = 2, kFlagLocalNorm = 4;

// Mirrors shaders/block_states.comp.
struct StatesPush {
    uint32_t n;
    uint32_t blockSize;
    uint32_t blocks;
    uint32_t features;
    uint32_t kvHeads;
    uint32_t featureTiles;
    uint32_t v[3];
};

// Mirrors shaders/polysketch_output.comp.
struct OutputPush {
    uint32_t n;
    uint32_t blockSize;
    uint32_t blocks;
    uint32_t features;
    uint32_t headRatio;
    uint32_t qHeads;
    uint32_t kvHeads;
    uint32_t tilesPerBlock;
    uint32_t v[3];
    uint32_t o[3];
};

static_assert(sizeof(FeaturePush) <= Pipelines::kPushConstantBytes, "push constants too large");
static_assert(sizeof(StatesPush) <= Pipelines::kPushConstantBytes, "push constants too large");
static_assert(sizeof(OutputPush) <= Pipelines::kPushConstantBytes, "push constants too large");

void putStrides(uint32_t dst[3], const PskTensorStrides& s) {
    dst[0] = static_cast<uint32_t>(s.batch);
    dst[1] = static_cast<uint32_t>(s.head);
    dst[2] = static_cast<uint32_t>(s.token);
}

/** Rows of a tensor with these strides start on a multiple of `floats` elements (vec4 or 8-float reads). */
bool alignedRows(const PskTensorStrides& s, uint32_t floats) { return (s.batch | s.head | s.token) % floats == 0; }

uint32_t floorPow2(uint32_t x) {
    uint32_t p = 1;
    while (p * 2 <= x) p *= 2;
    return p;
}

uint32_t ceilDiv(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

VkDeviceSize alignUp(VkDeviceSize x, VkDeviceSize a) { return (x + a - 1) / a * a; }

}  // namespace

PolysketchPlan planPolysketch(const AttentionConfig& c, const PackedSketch& sketch, const DeviceCaps& caps) {
    PolysketchPlan plan;
    const VkPhysicalDeviceLimits& limits = caps.limits();
    const char* type = dataTypeSuffix(c.dataType);
    plan.sketchLength = sketch.sketchLength;
    plan.features = sketch.features();
    plan.blockSize = c.blockSize;
    plan.nodeScratch = !sketch.learned && sketch.levels == 2;
    for (int i = 0; i < 3; ++i) plan.maxGroups[i] = limits.maxComputeWorkGroupCount[i];
    plan.maxRange = limits.maxStorageBufferRange;
    plan.regionAlignment = std::max<VkDeviceSize>(256, limits.minStorageBufferOffsetAlignment);
    const uint32_t invocations = limits.maxComputeWorkGroupInvocations;  // >= 128 (Vulkan minimum)
    const uint32_t shared = std::min<uint32_t>(limits.maxComputeSharedMemorySize, 32768);
    const uint32_t R = plan.sketchLength, dv = c.valueDim;

    // Lane-team variants (team_kernels.hpp) on CPU devices: 8 teams of 8 lanes per workgroup; a
    // lane owns C4 vec4s of value columns (C4 = ceil(dv / 32), so dv <= 128 keeps the 16 x 4 C4
    // accumulators of its team's rows in registers or close by); sketch rows are read as vec4s
    // (R % 4 == 0). Each kernel falls back to its generic variant on its own.
    const uint32_t c4 = (dv + 31) / 32;
    const bool team = useTeamKernels(caps) && dv % 4 == 0 && c4 <= 4 && R % 4 == 0;
    plan.teamStates = team && findShader(cat("block_states_team.", type)) != nullptr;
    plan.teamOutput = team && (!c.localExact || (c.headDim % 4 == 0 && c.headDim <= 128)) &&
                      findShader(cat("polysketch_output_team.", type)) != nullptr;
    plan.teamFeatures = team && !sketch.learned && sketch.levels == 1 && c.headDim % 4 == 0 && c.headDim <= 128 &&
                        findShader(cat("sketch_features_team.", type)) != nullptr;

    // State rows: dv values and the normalizer, zero-padded to whole vec4s, or to 8 floats where
    // the team output reads Z 8 floats (one u64vec4) at a time.
    const uint32_t stateAlign = plan.teamOutput ? 8 : 4;
    plan.stateStride = (dv + 1 + stateAlign - 1) / stateAlign * stateAlign;

    // Feature map: one row per invocation.
    plan.featureRows = std::min<uint32_t>(64, invocations);
    plan.featureShader = cat("sketch_features.", sketch.learned ? "learned" : "random", ".", type);
    plan.featureSpec = {plan.featureRows, c.headDim, R, sketch.levels, sketch.hidden};

    // Block states: 16 feature groups x 4 column groups of invocations; each invocation holds
    // 4 features x up to 16 value columns. Keys staged so that they fit in 16 KiB.
    const uint32_t featGroups = 16, featsPerThread = 4, colGroups = 4;
    const uint32_t colsPerThread = std::min<uint32_t>(16, (ceilDiv(dv, colGroups) + 3) / 4 * 4);  // whole vec4s
    plan.statesTileF = featGroups * featsPerThread;
    plan.statesTileC = colGroups * colsPerThread;
    const uint32_t statesBudget = std::min<uint32_t>(shared, 16384);
    const uint32_t statesKeyTile = std::max<uint32_t>(1, std::min<uint32_t>(32, floorPow2(statesBudget / ((plan.statesTileF + plan.statesTileC) * 4))));
    if (statesKeyTile * (plan.statesTileF + plan.statesTileC) * 4 > shared)
        fail(PSK_ERROR_UNSUPPORTED, "sketch too long for this device's shared memory");
    plan.statesShader = cat("block_states.", type);
    plan.statesSpec = {featGroups * colGroups, R, dv, featGroups, featsPerThread, colGroups, colsPerThread, statesKeyTile,
                       plan.stateStride};

    // Output: ROWS query rows per workgroup inside one block (fewer for small blocks, to waste
    // fewer invocations); Z staged FEAT_TILE rows at a time; local keys KEY_TILE at a time.
    // RPI rows per invocation (1, 2 or 4; the shader supports each) let one staged vec4 of Z or
    // of a key/value row feed RPI x 4 multiply-adds. On llvmpipe RPI = 4 would halve the
    // output's load count, but its compile time (values live across the barriers become a
    // coroutine frame) is 20-30 s and RPI = 2 is 10 s, against ~2 s for RPI = 1; GPUs prefer 1
    // anyway (register pressure). So 1 everywhere for now.
    plan.outputRows = c.blockSize >= 64 ? 64 : c.blockSize >= 32 ? 32 : 16;
    plan.outputRows = std::min(plan.outputRows, floorPow2(std::max<uint32_t>(1, shared / 2 / (R * 4))));  // sq_tile <= half
    plan.outputRowsPerInvocation = 1;
    const uint32_t outputInvocations = plan.outputRows / plan.outputRowsPerInvocation;
    const uint32_t featTile = 16;
    const bool local = c.causal;
    const uint32_t keyWidth = c.localExact ? c.headDim : R;
    const uint32_t sqBytes = (R * plan.outputRows + 3) / 4 * 16;  // sq_tile
    if (featTile * 4 + sqBytes >= shared) fail(PSK_ERROR_UNSUPPORTED, "sketch too long for this device's shared memory");
    const uint32_t budget = shared - featTile * 4 - sqBytes;
    const uint32_t keyRow = (keyWidth + 3) / 4 * 4 + (dv + 3) / 4 * 4, zRow = (dv + 4) / 4 * 4;  // padded to vec4s
    uint32_t keyTile = std::min<uint32_t>(32, floorPow2(budget / (keyRow * 4)));
    if (keyTile == 0 || featTile * zRow * 4 > budget)
        fail(PSK_ERROR_UNSUPPORTED, "head dims too large for this device's shared memory");
    const uint32_t smemFloats = std::max(featTile * zRow, local ? keyTile * keyRow : 4u);
    plan.outputShader = cat("polysketch_output.", type);
    plan.outputSpec = {outputInvocations, R, c.headDim, dv, featTile, keyTile, c.degree, c.causal ? 1u : 0u,
                       c.localExact ? 1u : 0u, smemFloats, plan.outputRowsPerInvocation, plan.stateStride};

    if (plan.teamFeatures) {
        plan.featureRows = kTeamWorkgroupRows;
        plan.featureShader = cat("sketch_features_team.", type);
        plan.featureSpec = {c.headDim, R, (R + 31) / 32, 0u};
        if (c.dataType == PSK_DATA_TYPE_FLOAT32) {
            // Rows 8 floats per load where h allows it, else vec4s.
            plan.featureVecRowFloats = c.headDim % 8 == 0 ? 8 : 4;
            plan.featureSpecVec4 = plan.featureSpec;
            plan.featureSpecVec4.back() = plan.featureVecRowFloats / 4;
        }
    }
    if (plan.teamStates) {
        plan.statesShader = cat("block_states_team.", type);
        plan.statesSpec = {R, dv, plan.stateStride, c4};
        plan.statesTileF = kTeamWorkgroupRows;
        plan.statesTileC = std::max<uint32_t>(dv, 1);  // every value column in one workgroup
    }
    if (plan.teamOutput) {
        plan.outputShader = cat("polysketch_output_team.", type);
        plan.outputSpec = {R, c.headDim, dv, c.degree, c.causal ? 1u : 0u, c.localExact ? 1u : 0u, plan.stateStride, c4, 0u};
        if (c.dataType == PSK_DATA_TYPE_FLOAT32) {
            // v rows 8 floats per load where dv and the lane's columns allow it, else vec4s.
            plan.outputVecRowFloats = c4 % 2 == 0 && dv % 8 == 0 ? 8 : 4;
            plan.outputSpecVec4 = plan.outputSpec;
            plan.outputSpecVec4.back() = plan.outputVecRowFloats / 4;
        }
        plan.outputRows = kTeamWorkgroupRows;
        plan.outputRowsPerInvocation = 1;
    }
    return plan;
}

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
                 "); use a smaller batch or fewer tokens per call", name[0] == 's' ? ", or a larger block size" : "");
        r.offset = cursor;
        r.size = floats * 4;
        cursor = alignUp(cursor + r.size, plan.regionAlignment);
        return r;
    };
    const uint64_t R = plan.sketchLength;
    ws.qSketch = region("q sketches", B * c.numQueryHeads * n * R);
    ws.kSketch = region("k sketches", B * c.numKeyValueHeads * n * R);
    if (c.causal && c.localExact) {
        ws.qLocal = region("local q rows", B * c.numQueryHeads * n * c.headDim);
        ws.kLocal = region("local k rows", B * c.numKeyValueHeads * n * c.headDim);
    }
    if (plan.nodeScratch) {
        ws.qNodes = region("q sketch nodes", B * c.numQueryHeads * n * 2 * R);
        ws.kNodes = region("k sketch nodes", B * c.numKeyValueHeads * n * 2 * R);
    }
    ws.states = region("states", B * c.numKeyValueHeads * ws.blocks * uint64_t(plan.features) * plan.stateStride);
    ws.total = cursor;
    return ws;
}

void recordSelfTensor(Recorder& rec, VkPipeline pipeline, const DeviceCaps& caps, BufferRange sketches, BufferRange pairs,
                      BufferRange features, uint32_t rows, uint32_t sketchLength) {
    const uint32_t F = sketchLength * (sketchLength + 1) / 2;
    const uint32_t maxY = caps.limits().maxComputeWorkGroupCount[1], maxZ = caps.limits().maxComputeWorkGroupCount[2];
    const uint32_t rowsY = std::min(rows, maxY);
    const uint32_t rowsZ = ceilDiv(rows, rowsY);
    if (rowsZ > maxZ || uint64_t(rows) * F >= (uint64_t(1) << 32)) fail(PSK_ERROR_TOO_LARGE, "too many feature rows");
    const uint32_t push[4] = {rows, sketchLength, F, rowsY};
    rec.dispatch(pipeline, {reads(sketches), reads(pairs), writes(features)}, push, sizeof(push), ceilDiv(F, 64), rowsY, rowsZ);
}

FeatureMapRanges featureMapRanges(const PolysketchPlan& plan, const AttentionConfig& c, const PolysketchWorkspace& ws,
                                  BufferRange workspace) {
    auto sub = [&](const PolysketchWorkspace::Region& r) { return BufferRange{workspace.buffer, workspace.offset + r.offset, r.size}; };
    FeatureMapRanges f;
    f.qSketch = sub(ws.qSketch);
    f.kSketch = sub(ws.kSketch);
    // Bindings the kernel does not write still need a valid range: the sketch rows stand in.
    const bool local = c.causal && c.localExact;
    f.qLocal = local ? sub(ws.qLocal) : f.qSketch;
    f.kLocal = local ? sub(ws.kLocal) : f.kSketch;
    f.qNodes = plan.nodeScratch ? sub(ws.qNodes) : f.qSketch;
    f.kNodes = plan.nodeScratch ? sub(ws.kNodes) : f.kSketch;
    return f;
}

void recordFeatureMaps(Recorder& rec, const PolysketchPlan& plan, const PolysketchResources& res, const PackedSketch& sketch,
                       const AttentionConfig& c, const ForwardGeometry& g, BufferRange q, BufferRange k, const FeatureMapRanges& f) {
    const bool local = c.causal && c.localExact;
    const uint32_t groups = ceilDiv(g.tokens, plan.featureRows);
    FeaturePush fp{};
    fp.n = g.tokens;
    fp.nodeScale = sketch.nodeScale;
    fp.flags = (sketch.qkNorm ? kFlagQkNorm : 0) | (local ? kFlagWriteLocal : 0) | (local && sketch.localNorm ? kFlagLocalNorm : 0);
    fp.lnScale = sketch.lnScale;
    fp.lnBias = sketch.lnBias;
    fp.localLnScale = sketch.localLnScale;
    fp.localLnBias = sketch.localLnBias;
    std::copy(sketch.offsets.begin(), sketch.offsets.end(), fp.w);
    // The team kernel's vec4-row variant where the strides allow it.
    auto pipeline = [&](const PskTensorStrides& st) {
        return alignedRows(st, plan.featureVecRowFloats) && res.featuresVec4 ? res.featuresVec4 : res.features;
    };
    fp.heads = c.numQueryHeads;
    fp.scale = c.scale;
    putStrides(fp.strides, g.q.strides);
    rec.dispatch(pipeline(g.q.strides), {reads(q), reads(res.weights), writes(f.qSketch), writes(f.qLocal), writes(f.qNodes)}, &fp,
                 sizeof(fp), groups, c.numQueryHeads, g.batch);
    fp.heads = c.numKeyValueHeads;
    fp.scale = 1.0f;  // k is never scaled
    putStrides(fp.strides, g.k.strides);
    rec.dispatch(pipeline(g.k.strides), {reads(k), reads(res.weights), writes(f.kSketch), writes(f.kLocal), writes(f.kNodes)}, &fp,
                 sizeof(fp), groups, c.numKeyValueHeads, g.batch);
}

void recordPolysketch(Recorder& rec, Pipelines& pipelines, const DeviceCaps& caps, const PolysketchPlan& plan,
                      const PolysketchResources& res, const PackedSketch& sketch, const AttentionConfig& c,
                      const BoundTensors& t) {
    const ForwardGeometry& g = t.geometry;
    const PolysketchWorkspace ws = polysketchWorkspace(plan, c, g);
    const FeatureMapRanges f = featureMapRanges(plan, c, ws, t.workspace);
    const BufferRange states{t.workspace.buffer, t.workspace.offset + ws.states.offset, ws.states.size};
    const bool local = c.causal && c.localExact;

    // Dispatch limits, checked before anything is recorded.
    const uint32_t featureGroups = ceilDiv(g.tokens, plan.featureRows);
    const uint32_t featureTiles = ceilDiv(plan.features, plan.statesTileF);
    const uint32_t colTiles = ceilDiv(c.valueDim, plan.statesTileC);
    const uint32_t tilesPerBlock = ceilDiv(plan.blockSize, plan.outputRows);
    const uint64_t outputGroups = uint64_t(ws.blocks) * tilesPerBlock;
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

    // 1. Feature map of q and of k (independent: no barrier between them).
    recordFeatureMaps(rec, plan, res, sketch, c, g, t.q, t.k, f);

    // 2. Block states H_l = phi(K_l)^T [V_l | 1].
    StatesPush sp{};
    sp.n = g.tokens;
    sp.blockSize = plan.blockSize;
    sp.blocks = ws.blocks;
    sp.features = plan.features;
    sp.kvHeads = c.numKeyValueHeads;
    sp.featureTiles = featureTiles;
    putStrides(sp.v, g.v.strides);
    rec.dispatch(res.states, {reads(f.kSketch), reads(t.v), reads(res.pairs), writes(states)}, &sp, sizeof(sp),
                 featureTiles * colTiles, ws.blocks, kvSequences);

    // 3. Causal: exclusive prefix over blocks (Blelloch); full: one sum of every block.
    const uint32_t elems = plan.features * plan.stateStride;
    if (c.causal) {
        const BlockScanPlan scan = planBlockScan(ws.blocks, caps);
        recordBlockScan(rec, pipelines.get(blockScanShader(), scan.specConstants), scan, states, kvSequences, ws.blocks, elems);
    } else {
        const BlockScanPlan reduce = planBlockReduce(ws.blocks, caps);
        recordBlockReduce(rec, pipelines.get(blockReduceShader(), reduce.specConstants), reduce, states, kvSequences,
                          ws.blocks, elems);
    }

    // 4. Output: phi(q)^T Z + local part, normalized.
    OutputPush op{};
    op.n = g.tokens;
    op.blockSize = plan.blockSize;
    op.blocks = ws.blocks;
    op.features = plan.features;
    op.headRatio = c.numQueryHeads / c.numKeyValueHeads;
    op.qHeads = c.numQueryHeads;
    op.kvHeads = c.numKeyValueHeads;
    op.tilesPerBlock = tilesPerBlock;
    putStrides(op.v, g.v.strides);
    putStrides(op.o, g.out.strides);
    rec.dispatch(alignedRows(g.v.strides, plan.outputVecRowFloats) && res.outputVec4 ? res.outputVec4 : res.output,
                 {reads(f.qSketch), reads(local ? f.kLocal : f.kSketch), reads(t.v), writes(t.out), reads(states), reads(res.pairs),
                  reads(f.qLocal)},
                 &op, sizeof(op), static_cast<uint32_t>(outputGroups), c.numQueryHeads, g.batch);
}

}  // namespace psk
