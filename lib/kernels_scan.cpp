#include <algorithm>

#include "error.hpp"
#include "kernels.hpp"

namespace psk {

namespace {

// Mirrors the push constants of block_scan.comp and block_reduce.comp.
struct ColumnPush {
    uint32_t blocks;
    uint32_t elems;
    uint32_t groupsX;
};

// Workgroups of about 128 invocations: lanes for the blocks, the rest spread over columns.
BlockScanPlan planColumns(uint32_t threads, const DeviceCaps& caps) {
    BlockScanPlan plan;
    const uint32_t invocations = std::min<uint32_t>(128, caps.limits().maxComputeWorkGroupInvocations);
    plan.threads = std::min(threads, invocations);
    plan.columns = std::max<uint32_t>(1, invocations / plan.threads);
    plan.specConstants = {plan.threads, plan.columns};
    plan.maxGroupsX = caps.limits().maxComputeWorkGroupCount[0];
    plan.maxGroupsY = caps.limits().maxComputeWorkGroupCount[1];
    plan.maxGroupsZ = caps.limits().maxComputeWorkGroupCount[2];
    return plan;
}

void dispatchColumns(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems, const char* what) {
    const uint32_t groups = (elems + plan.columns - 1) / plan.columns;
    const uint32_t groupsX = std::min(groups, plan.maxGroupsX);
    const uint32_t groupsY = (groups + groupsX - 1) / groupsX;
    if (groupsY > plan.maxGroupsY || sequences > plan.maxGroupsZ)
        fail(PSK_ERROR_TOO_LARGE, what, " of ", elems, " x ", sequences, " columns exceeds the device's dispatch limits");
    const ColumnPush push{blocks, elems, groupsX};
    recorder.dispatch(pipeline, {writes(states)}, &push, sizeof(push), groupsX, groupsY, sequences);
}

}  // namespace

// Lanes per column are capped so that a workgroup always spans at least 16 adjacent columns:
// with one column per workgroup every load is a strided gather, which made the scan the largest
// stage at n = 32k on llvmpipe. Longer scans take more segments (each one a Blelloch tree) with a
// carry between them.
constexpr uint32_t kMaxScanLanes = 8;

BlockScanPlan planBlockScan(uint32_t blocks, const DeviceCaps& caps) {
    // Enough lanes that one segment (2 blocks per lane) covers every block, up to 8. Only a few
    // lane counts are used, so that the attention object can create every pipeline up front.
    uint32_t threads = 2;
    while (threads < kMaxScanLanes && 2 * threads < blocks) threads *= 4;
    return planColumns(threads, caps);
}

BlockScanPlan planBlockReduce(uint32_t blocks, const DeviceCaps& caps) {
    const uint32_t threads = blocks <= 4 ? 4 : 64;  // two variants, created up front
    return planColumns(threads, caps);
}

void recordBlockScan(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems) {
    if (blocks == 0 || elems == 0 || sequences == 0) return;
    if (blocks == 1) {
        // Nothing before the first block: its prefix is zero.
        recorder.fill(states, uint64_t(sequences) * elems * 4, 0);
        return;
    }
    dispatchColumns(recorder, pipeline, plan, states, sequences, blocks, elems, "block scan");
}

void recordBlockReduce(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                       uint32_t sequences, uint32_t blocks, uint32_t elems) {
    if (blocks <= 1 || elems == 0 || sequences == 0) return;  // one block is its own sum
    dispatchColumns(recorder, pipeline, plan, states, sequences, blocks, elems, "block reduction");
}

}  // namespace psk
