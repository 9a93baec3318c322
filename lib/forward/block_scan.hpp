// The prefix over block states (causal polysketch) and its full-attention counterpart, the sum
// over blocks: block_scan.comp and block_reduce.comp.
#pragma once

#include <vector>

#include "kernels/kernel_dispatch.hpp"
#include "kernels/kernel_table.hpp"
#include "vk/device_caps.hpp"
#include "vk/recorder.hpp"

namespace psk {

/**
 * Exclusive prefix sum over blocks, in place (shaders/block_scan.comp): `states` holds
 * [sequences][blocks][elems] float32. One dispatch, whatever the number of blocks (at most
 * 65535 loop iterations per invocation: 2 * threads * 65535 blocks, 65535 * threads for the
 * reduction). Columns are vec4 (4 adjacent floats) when elems % 4 == 0, else single floats. Needs
 * basic and relative-shuffle subgroup operations in compute shaders (planning fails otherwise).
 */
struct BlockScanPlan {
    KernelChoice kernel;
    uint32_t threads = 1;  // lanes per column (one subgroup cluster); a scan segment is 2 * threads blocks
    uint32_t columns = 1;  // adjacent columns (vec4 or float) per workgroup
    uint32_t maxGroupsX = 65535;
    uint32_t maxGroupsY = 65535;
    uint32_t maxGroupsZ = 65535;
};
BlockScanPlan planBlockScan(uint32_t blocks, const DeviceCaps& caps);

/**
 * An initial prefix for the scan (a forward with a decode state, docs/DECODING.md "State
 * passing"): every Z_l starts from z instead of 0, and with addH block 0's H_0 gets h added (the
 * unfinished block's running sum). z and h hold [sequence][F][row] floats from element `base`
 * on; the states' rows are `stride` floats (their padding columns start from 0).
 */
struct ScanInitial {
    BufferRange z, h;
    uint32_t row = 0, stride = 0, base = 0;
    bool addH = false;
    /**
     * What the decode state keeps after the call, written by the scan into `tail` as
     * [part][sequence][elems] floats, the states' rows of `stride` floats (padding columns
     * included; one vec4 store per invocation, the caller copies the rows it needs): None; Total,
     * one part, the inclusive prefix at the last block (Z_{t-1} + H_{t-1}); Split, Z_{t-1} then the
     * last block's own H_{t-1} (h included when it is block 0 and addH is set). The values sit in
     * the scan's registers anyway, so the state need not fold the last block's rows again.
     */
    enum class Tail : uint32_t { None = 0, Total = 1, Split = 2 } tailMode = Tail::None;
    BufferRange tail;
};
void recordBlockScan(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems, const ScanInitial* initial = nullptr);

/** Sum over all blocks, written into block 0 in place (shaders/block_reduce.comp): full mode. */
BlockScanPlan planBlockReduce(uint32_t blocks, const DeviceCaps& caps);
void recordBlockReduce(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                       uint32_t sequences, uint32_t blocks, uint32_t elems);

/** Every scan (causal) or reduction (full) plan a call may pick, so that their pipelines exist up front. */
std::vector<BlockScanPlan> allBlockScanPlans(bool causal, const DeviceCaps& caps);

}  // namespace psk
