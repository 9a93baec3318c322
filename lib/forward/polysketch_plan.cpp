#include "forward/polysketch_plan.hpp"

#include <algorithm>

#include "kernels/team_kernels.hpp"
#include "util/error.hpp"
#include "util/sizes.hpp"

namespace psk {

PolysketchPlan planPolysketch(const AttentionConfig& c, const PackedSketch& sketch, const DeviceCaps& caps) {
    const PolysketchTiles& tiles = kPolysketchTiles;
    PolysketchPlan plan;
    const VkPhysicalDeviceLimits& limits = caps.limits();
    const PskDataType type = c.dataType;
    plan.sketchLength = sketch.sketchLength;
    plan.features = sketch.features();
    plan.blockSize = c.blockSize;
    plan.nodeScratch = !sketch.learned && sketch.levels == 2;
    for (int i = 0; i < 3; ++i) plan.maxGroups[i] = limits.maxComputeWorkGroupCount[i];
    plan.maxRange = limits.maxStorageBufferRange;
    plan.regionAlignment = std::max<VkDeviceSize>(256, limits.minStorageBufferOffsetAlignment);
    const uint32_t invocations = limits.maxComputeWorkGroupInvocations;  // >= 128 (Vulkan minimum)
    const uint32_t shared = std::min<uint32_t>(limits.maxComputeSharedMemorySize, tiles.sharedBytesCap);
    const uint32_t R = plan.sketchLength, dv = c.valueDim;

    // --- Eligibility of the lane-team variants (team_kernels.hpp): CPU devices with 8-lane
    // subgroups; 8 teams of 8 lanes per workgroup; a lane owns C4 vec4s of value columns
    // (C4 = ceil(dv / 32), so dv <= 128 keeps the 16 x 4 C4 accumulators of its team's rows in
    // registers or close by); sketch rows are read as vec4s (R % 4 == 0). Each stage falls back to
    // its generic variant on its own.
    const uint32_t c4 = (dv + 31) / 32;
    const bool teamDevice = useTeamKernels(caps);
    const bool teamShapes = dv % 4 == 0 && c4 <= 4 && R % 4 == 0;
    const bool team = teamDevice && teamShapes;
    const char* whyNotTeam = !teamDevice ? teamKernelsUnusedReason(caps) : "dv % 4 != 0, dv > 128 or r % 4 != 0";
    const bool teamStates = team && findKernelVariant(KernelId::BlockStatesTeam, "", type) != nullptr;
    const bool teamOutput = team && (!c.localExact || (c.headDim % 4 == 0 && c.headDim <= 128)) &&
                            findKernelVariant(KernelId::PolysketchOutputTeam, "", type) != nullptr;
    const bool teamFeatures = team && !sketch.learned && sketch.levels == 1 && c.headDim % 4 == 0 && c.headDim <= 128 &&
                              findKernelVariant(KernelId::SketchFeaturesTeam, "", type) != nullptr;

    // State rows: dv values and the normalizer, zero-padded to whole vec4s, or to 8 floats where
    // the team output reads Z 8 floats (one u64vec4) at a time.
    const uint32_t stateAlign = teamOutput ? 8 : 4;
    plan.stateStride = (dv + 1 + stateAlign - 1) / stateAlign * stateAlign;

    // --- Feature map.
    if (teamFeatures) {
        plan.featureRows = kTeamWorkgroupRows;
        kernel::SketchFeaturesTeamSpec spec;
        spec.HEAD_DIM = c.headDim;
        spec.SKETCH = R;
        spec.CPL4 = (R + 31) / 32;
        spec.X_LOAD = 0;
        plan.featureKernel = KernelChoice::make(KernelId::SketchFeaturesTeam, "", type, spec,
                                           "team kernel: CPU device, random sketch of one level (p = 4), h % 4 == 0, h <= 128");
        if (type == PSK_DATA_TYPE_FLOAT32) {
            // Rows 8 floats per load where h allows it, else vec4s.
            plan.featureVecRowFloats = c.headDim % 8 == 0 ? 8 : 4;
            spec.X_LOAD = plan.featureVecRowFloats / 4;
            plan.featureKernelVec = KernelChoice::make(KernelId::SketchFeaturesTeam, "", type, spec,
                                                  cat("float32 rows read ", plan.featureVecRowFloats,
                                                      " floats per load, for calls whose q/k strides are multiples of ",
                                                      plan.featureVecRowFloats));
        }
    } else {
        plan.featureRows = std::min<uint32_t>(tiles.featureRows, invocations);
        kernel::SketchFeaturesSpec spec;
        spec.ROWS = plan.featureRows;
        spec.HEAD_DIM = c.headDim;
        spec.SKETCH = R;
        spec.LEVELS = sketch.levels;
        spec.HIDDEN = sketch.hidden;
        plan.featureKernel = KernelChoice::make(
            KernelId::SketchFeatures, sketch.learned ? "learned" : "random", type, spec,
            sketch.learned || sketch.levels != 1 ? "generic kernel: the team kernel has random one-level (p = 4) sketches only"
                                                 : cat("generic kernel: ", whyNotTeam));
    }

    // --- Block states.
    if (teamStates) {
        kernel::BlockStatesTeamSpec spec;
        spec.SKETCH = R;
        spec.VALUE_DIM = dv;
        spec.Z_STRIDE = plan.stateStride;
        spec.C4 = c4;
        plan.statesKernel = KernelChoice::make(KernelId::BlockStatesTeam, "", type, spec,
                                         "team kernel: CPU device, dv % 4 == 0, dv <= 128, r % 4 == 0");
        plan.statesTileF = kTeamWorkgroupRows;
        plan.statesTileC = std::max<uint32_t>(dv, 1);  // every value column in one workgroup
    } else {
        // featGroups x colGroups invocations; each holds featsPerThread features x up to 16 value
        // columns. Keys staged so that they fit in 16 KiB.
        kernel::BlockStatesSpec spec;
        spec.FEAT_GROUPS = tiles.statesFeatureGroups;
        spec.FEATS_PER_THREAD = tiles.statesFeaturesPerThread;
        spec.COL_GROUPS = tiles.statesColumnGroups;
        spec.COLS_PER_THREAD =
            std::min<uint32_t>(tiles.statesMaxColumnsPerThread, (ceilDiv(dv, spec.COL_GROUPS) + 3) / 4 * 4);  // whole vec4s
        spec.THREADS = spec.FEAT_GROUPS * spec.COL_GROUPS;
        spec.SKETCH = R;
        spec.VALUE_DIM = dv;
        plan.statesTileF = spec.FEAT_GROUPS * spec.FEATS_PER_THREAD;
        plan.statesTileC = spec.COL_GROUPS * spec.COLS_PER_THREAD;
        const uint32_t budget = std::min<uint32_t>(shared, tiles.statesSharedBytes);
        spec.KEY_TILE = std::max<uint32_t>(
            1, std::min<uint32_t>(tiles.statesMaxKeyTile, floorPow2(budget / ((plan.statesTileF + plan.statesTileC) * 4))));
        if (spec.KEY_TILE * (plan.statesTileF + plan.statesTileC) * 4 > shared)
            fail(PSK_ERROR_UNSUPPORTED, "sketch too long for this device's shared memory");
        spec.Z_STRIDE = plan.stateStride;
        plan.statesKernel = KernelChoice::make(KernelId::BlockStates, "", type, spec,
                                         team ? "generic kernel: the team variant is not built" : cat("generic kernel: ", whyNotTeam));
    }

    // --- Output. Generic: ROWS query rows per workgroup inside one block (fewer for small
    // blocks, to waste fewer invocations); Z staged FEAT_TILE rows at a time; local keys KEY_TILE
    // at a time. RPI rows per invocation (1, 2 or 4; the shader supports each) would let one
    // staged vec4 feed RPI x 4 multiply-adds, but on llvmpipe RPI = 4 compiles for 20-30 s (values
    // live across barriers become a coroutine frame) and RPI = 2 for 10 s, against ~2 s for 1, and
    // GPUs prefer 1 anyway (register pressure). So 1 everywhere for now. The shared-memory checks
    // run whichever variant is chosen, as they always have.
    plan.outputRows = c.blockSize >= 64 ? tiles.outputMaxRows : c.blockSize >= 32 ? 32 : 16;
    plan.outputRows = std::min(plan.outputRows, floorPow2(std::max<uint32_t>(1, shared / 2 / (R * 4))));  // sq_tile <= half
    kernel::PolysketchOutputSpec outSpec;
    outSpec.RPI = 1;
    outSpec.ROWS = plan.outputRows / outSpec.RPI;
    outSpec.FEAT_TILE = tiles.outputFeatureTile;
    const uint32_t keyWidth = c.localExact ? c.headDim : R;
    const uint32_t sqBytes = (R * plan.outputRows + 3) / 4 * 16;  // sq_tile
    if (outSpec.FEAT_TILE * 4 + sqBytes >= shared) fail(PSK_ERROR_UNSUPPORTED, "sketch too long for this device's shared memory");
    const uint32_t budget = shared - outSpec.FEAT_TILE * 4 - sqBytes;
    const uint32_t keyRow = (keyWidth + 3) / 4 * 4 + (dv + 3) / 4 * 4, zRow = (dv + 4) / 4 * 4;  // padded to vec4s
    outSpec.KEY_TILE = std::min<uint32_t>(tiles.outputMaxKeyTile, floorPow2(budget / (keyRow * 4)));
    if (outSpec.KEY_TILE == 0 || outSpec.FEAT_TILE * zRow * 4 > budget)
        fail(PSK_ERROR_UNSUPPORTED, "head dims too large for this device's shared memory");
    outSpec.SMEM_FLOATS = std::max(outSpec.FEAT_TILE * zRow, c.causal ? outSpec.KEY_TILE * keyRow : 4u);
    outSpec.SKETCH = R;
    outSpec.HEAD_DIM = c.headDim;
    outSpec.VALUE_DIM = dv;
    outSpec.DEGREE = c.degree;
    outSpec.CAUSAL = c.causal ? 1u : 0u;
    outSpec.LOCAL_EXACT = c.localExact ? 1u : 0u;
    outSpec.Z_STRIDE = plan.stateStride;
    if (teamOutput) {
        kernel::PolysketchOutputTeamSpec spec;
        spec.SKETCH = R;
        spec.HEAD_DIM = c.headDim;
        spec.VALUE_DIM = dv;
        spec.DEGREE = c.degree;
        spec.CAUSAL = c.causal ? 1u : 0u;
        spec.LOCAL_EXACT = c.localExact ? 1u : 0u;
        spec.Z_STRIDE = plan.stateStride;
        spec.C4 = c4;
        spec.V_LOAD = 0;
        plan.outputRows = kTeamWorkgroupRows;
        plan.outputKernel = KernelChoice::make(KernelId::PolysketchOutputTeam, "", type, spec,
                                         "team kernel: CPU device, dv % 4 == 0, dv <= 128, r % 4 == 0 (local exact: h % 4 == 0, h <= 128)");
        if (type == PSK_DATA_TYPE_FLOAT32) {
            // v rows 8 floats per load where dv and the lane's columns allow it, else vec4s.
            plan.outputVecRowFloats = c4 % 2 == 0 && dv % 8 == 0 ? 8 : 4;
            spec.V_LOAD = plan.outputVecRowFloats / 4;
            plan.outputKernelVec = KernelChoice::make(KernelId::PolysketchOutputTeam, "", type, spec,
                                                cat("float32 v rows read ", plan.outputVecRowFloats,
                                                    " floats per load, for calls whose v strides are multiples of ",
                                                    plan.outputVecRowFloats));
        }
    } else {
        plan.outputKernel = KernelChoice::make(KernelId::PolysketchOutput, "", type, outSpec,
                                         team ? "generic kernel: local exact with h % 4 != 0 or h > 128, or the team variant is not built"
                                              : cat("generic kernel: ", whyNotTeam));
    }
    return plan;
}

}  // namespace psk
