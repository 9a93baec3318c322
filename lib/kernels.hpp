// Recording of the attention kernels into a Recorder. Each kind has one entry point taking the
// bound device tensors; the scheduler (attention.cpp) owns buffers, submission and timing.
#pragma once

#include <vector>

#include "attention_config.hpp"
#include "pipelines.hpp"
#include "recorder.hpp"

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
 * [sequences][blocks][elems] float32. One dispatch, whatever the number of blocks.
 */
struct BlockScanPlan {
    uint32_t threads = 1;  // power of two; a workgroup scans 2 * threads blocks per segment
    std::vector<uint32_t> specConstants;
    uint32_t maxGroupsX = 65535;
    uint32_t maxGroupsY = 65535;
    uint32_t maxGroupsZ = 65535;
};
BlockScanPlan planBlockScan(uint32_t blocks, const DeviceCaps& caps);
inline const char* blockScanShader() { return "block_scan.f32"; }
void recordBlockScan(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems);

}  // namespace psk
