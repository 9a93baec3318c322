// Recording of the attention kernels into a Recorder. Each kind has one entry point taking the
// bound device tensors; the scheduler (attention.cpp) owns buffers, submission and timing.
#pragma once

#include <vector>

#include "forward/attention_config.hpp"
#include "sketch/sketch_pack.hpp"
#include "vk/pipelines.hpp"
#include "vk/recorder.hpp"

namespace psk {

/** Device tensors of one forward call: buffers plus the geometry their contents follow. */
struct BoundTensors {
    BufferRange q, k, v, out;
    ForwardGeometry geometry;
    BufferRange workspace;  // scratch of the size the kind's workspace query returned
};

/** Specialization constants and tiling of the quadratic kernels (attention_tiled.comp). */
struct TiledAttentionPlan {
    std::string shader;
    std::vector<uint32_t> specConstants;
    uint32_t rows = 64;     // query rows per workgroup
    uint32_t keyTile = 32;  // key rows staged per step
    uint32_t maxGroupsX = 65535;
    // Keys one dispatch covers; longer sequences chain dispatches through a per-row state. Bounds
    // each invocation's loop iterations (see the llvmpipe note in attention_tiled.comp).
    uint32_t keysPerDispatch = 8192;
};

TiledAttentionPlan planTiledAttention(const AttentionConfig& config, const DeviceCaps& caps);

/** Number of key chunks (dispatches) for a sequence of `tokens`. */
uint32_t tiledKeyChunks(const TiledAttentionPlan& plan, uint32_t tokens);
/** Workspace bytes of a call: the per-row state when there is more than one key chunk. */
VkDeviceSize tiledWorkspaceBytes(const TiledAttentionPlan& plan, const AttentionConfig& config, const DeviceCaps& caps,
                                 const ForwardGeometry& geometry);

/** Softmax or exact polynomial attention: one dispatch per key chunk. */
void recordTiledAttention(Recorder& recorder, VkPipeline pipeline, const TiledAttentionPlan& plan,
                          const AttentionConfig& config, const BoundTensors& tensors);

/**
 * Exclusive prefix sum over blocks, in place (shaders/block_scan.comp): `states` holds
 * [sequences][blocks][elems] float32. One dispatch, whatever the number of blocks (at most
 * 65535 loop iterations per invocation: 2 * threads * 65535 blocks, 65535 * threads for the
 * reduction). Columns are vec4 (4 adjacent floats) when elems % 4 == 0, else single floats. Needs
 * basic and relative-shuffle subgroup operations in compute shaders (planning fails otherwise).
 */
struct BlockScanPlan {
    uint32_t threads = 1;  // lanes per column (one subgroup cluster); a scan segment is 2 * threads blocks
    uint32_t columns = 1;  // adjacent columns (vec4 or float) per workgroup
    std::vector<uint32_t> specConstants;
    uint32_t maxGroupsX = 65535;
    uint32_t maxGroupsY = 65535;
    uint32_t maxGroupsZ = 65535;
};
BlockScanPlan planBlockScan(uint32_t blocks, const DeviceCaps& caps);
inline const char* blockScanShader() { return "block_scan.f32"; }
void recordBlockScan(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems);

/** Sum over all blocks, written into block 0 in place (shaders/block_reduce.comp): full mode. */
BlockScanPlan planBlockReduce(uint32_t blocks, const DeviceCaps& caps);
inline const char* blockReduceShader() { return "block_reduce.f32"; }
void recordBlockReduce(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                       uint32_t sequences, uint32_t blocks, uint32_t elems);

// ---------------------------------------------------------------------------------------------
// Polysketch (docs/MATH.md section 6): feature map -> block states -> scan (causal) or reduction (full)
// -> output. Implemented in kernels_polysketch.cpp.
// ---------------------------------------------------------------------------------------------

struct PolysketchPlan {
    uint32_t sketchLength = 0;  // R
    uint32_t features = 0;      // F = R (R + 1) / 2
    uint32_t blockSize = 256;
    bool nodeScratch = false;  // degree 8: level-1 nodes pass through workspace memory
    /**
     * Floats per feature row of a block state: dv + 1 (value columns, then the normalizer column)
     * rounded up to a multiple of 4, so that every row starts 16-byte aligned and kernels read it
     * as vec4s. The padding columns are zero.
     */
    uint32_t stateStride = 0;
    bool teamFeatures = false;  // the feature map uses the lane-team variant (team_kernels.hpp)
    bool teamStates = false;    // block states use the lane-team variant
    bool teamOutput = false;    // the output uses the lane-team variant

    std::string featureShader;  // sketch_features.{random|learned}.<type>, or sketch_features_team.<type>
    std::vector<uint32_t> featureSpec;
    std::vector<uint32_t> featureSpecVec4;  // team kernel, float32: the vec4-row variant (else empty)
    uint32_t featureVecRowFloats = 4;       // ... used when every q/k stride is a multiple of this (4 or 8)
    uint32_t featureRows = 64;

    std::string statesShader;  // block_states.<type>
    std::vector<uint32_t> statesSpec;
    uint32_t statesTileF = 64, statesTileC = 64;

    std::string outputShader;  // polysketch_output.<type>
    std::vector<uint32_t> outputSpec;
    std::vector<uint32_t> outputSpecVec4;  // team kernel, float32: the vec4-row variant (else empty)
    uint32_t outputVecRowFloats = 4;       // ... used when every v stride is a multiple of this (4 or 8)
    uint32_t outputRows = 64;              // query rows per workgroup
    uint32_t outputRowsPerInvocation = 1;  // RPI: rows each invocation keeps in registers

    uint32_t maxGroups[3] = {65535, 65535, 65535};
    VkDeviceSize maxRange = 0;         // maxStorageBufferRange
    VkDeviceSize regionAlignment = 256;  // workspace regions start at multiples of this
};

PolysketchPlan planPolysketch(const AttentionConfig& config, const PackedSketch& sketch, const DeviceCaps& caps);

/** Where each intermediate of one call lives in the workspace buffer (bytes). */
struct PolysketchWorkspace {
    struct Region {
        VkDeviceSize offset = 0, size = 0;
    };
    Region qSketch, kSketch;  // S(q) rows [B * Hq][n][R], S(k) rows [B * Hkv][n][R]
    Region qLocal, kLocal;    // local exact only: q' rows [B * Hq][n][h], k' rows [B * Hkv][n][h]
    Region qNodes, kNodes;    // degree 8 only: level-1 sketch nodes of q and k rows, [rows][2][R]
    Region states;            // [B * Hkv][t][F][stateStride]: H_l, then Z_l (causal) or Z in block 0 (full)
    uint32_t blocks = 0;      // t = ceil(n / b)
    VkDeviceSize total = 0;
};

/** Workspace of a call; throws TOO_LARGE when a region exceeds what one binding can address. */
PolysketchWorkspace polysketchWorkspace(const PolysketchPlan& plan, const AttentionConfig& config,
                                        const ForwardGeometry& geometry);

/** Device objects owned by the attention object that every call uses. */
struct PolysketchResources {
    VkPipeline features = VK_NULL_HANDLE, states = VK_NULL_HANDLE, output = VK_NULL_HANDLE;
    // Team kernels only: the variants that read q/k (features) or v (output) rows as vec4s, for
    // float32 tensors whose strides are multiples of 4; null otherwise. `features` and `output`
    // handle any strides.
    VkPipeline featuresVec4 = VK_NULL_HANDLE, outputVec4 = VK_NULL_HANDLE;
    BufferRange weights;  // PackedSketch::data
    BufferRange pairs;    // selfTensorPairs(R)
};

/**
 * Materializes packed features phi = psi(S) of `rows` sketch rows of length R (self_tensor.comp):
 * sketches [rows][R] float32 -> features [rows][R (R + 1) / 2] float32. Not part of the forward
 * (which expands psi on the fly); for tests and tools.
 */
inline const char* selfTensorShader() { return "self_tensor.f32"; }
void recordSelfTensor(Recorder& recorder, VkPipeline pipeline, const DeviceCaps& caps, BufferRange sketches,
                      BufferRange pairs, BufferRange features, uint32_t rows, uint32_t sketchLength);

/** Workspace ranges the feature map writes; bindings a configuration does not use alias the sketch rows. */
struct FeatureMapRanges {
    BufferRange qSketch, kSketch, qLocal, kLocal, qNodes, kNodes;
};
FeatureMapRanges featureMapRanges(const PolysketchPlan& plan, const AttentionConfig& config, const PolysketchWorkspace& workspace,
                                  BufferRange workspaceBuffer);

/**
 * Records the feature maps of q and of k (the forward's first step): S rows, the local-exact rows
 * and, for degree 8, the node scratch. The decode step runs this alone on its one token.
 */
void recordFeatureMaps(Recorder& recorder, const PolysketchPlan& plan, const PolysketchResources& resources,
                       const PackedSketch& sketch, const AttentionConfig& config, const ForwardGeometry& geometry, BufferRange q,
                       BufferRange k, const FeatureMapRanges& ranges);

/** Records the whole polysketch forward; tensors.workspace must hold polysketchWorkspace().total. */
void recordPolysketch(Recorder& recorder, Pipelines& pipelines, const DeviceCaps& caps, const PolysketchPlan& plan,
                      const PolysketchResources& resources, const PackedSketch& sketch, const AttentionConfig& config,
                      const BoundTensors& tensors);

}  // namespace psk
