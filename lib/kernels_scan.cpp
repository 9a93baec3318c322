#include <algorithm>

#include "error.hpp"
#include "kernels.hpp"

namespace psk {

namespace {
struct ScanPush {
    uint32_t blocks;
    uint32_t elems;
    uint32_t columnsX;
};
}  // namespace

BlockScanPlan planBlockScan(uint32_t blocks, const DeviceCaps& caps) {
    BlockScanPlan plan;
    // Enough threads that one segment covers every block, up to 128 (longer: several segments).
    const uint32_t cap = std::min<uint32_t>(128, caps.limits().maxComputeWorkGroupInvocations);
    while (plan.threads < cap && 2 * plan.threads < blocks) plan.threads *= 2;
    plan.specConstants = {plan.threads};
    plan.maxGroupsX = caps.limits().maxComputeWorkGroupCount[0];
    plan.maxGroupsY = caps.limits().maxComputeWorkGroupCount[1];
    plan.maxGroupsZ = caps.limits().maxComputeWorkGroupCount[2];
    return plan;
}

void recordBlockScan(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems) {
    if (blocks <= 1 || elems == 0 || sequences == 0) {
        // Nothing before the first block: its prefix is zero.
        if (blocks == 1) recorder.fill(states, uint64_t(sequences) * elems * 4, 0);
        return;
    }
    // Columns spread over x and y: a state has up to F * (dv + 1) ~ 2M entries.
    const uint32_t columnsX = std::min(elems, plan.maxGroupsX);
    const uint32_t columnsY = (elems + columnsX - 1) / columnsX;
    if (columnsY > plan.maxGroupsY || sequences > plan.maxGroupsZ)
        fail(PSK_ERROR_TOO_LARGE, "block scan of ", elems, " x ", sequences, " columns exceeds the dispatch limits");
    const ScanPush push{blocks, elems, columnsX};
    recorder.dispatch(pipeline, {writes(states)}, &push, sizeof(push), columnsX, columnsY, sequences);
}

}  // namespace psk
