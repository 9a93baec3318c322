#include <algorithm>

#include "forward/block_scan.hpp"
#include "util/error.hpp"

namespace psk {

namespace {

// Invocations per workgroup: a multiple of every subgroup size up to 128. Without barriers the
// workgroup size hardly matters on llvmpipe; larger ones only cut the number of workgroups.
constexpr uint32_t kWorkgroup = 128;

// block_scan.comp and block_reduce.comp declare the same two constants.
template <KernelId Id>
KernelChoice columnsKernel(uint32_t workgroup, uint32_t lanes, std::string why) {
    typename KernelInterface<Id>::Spec spec;
    spec.WORKGROUP = workgroup;
    spec.LANES = lanes;
    return KernelChoice::make<Id>("", PSK_DATA_TYPE_FLOAT32, spec, std::move(why));
}

// Both shaders run a column on a cluster of `lanes` invocations of one subgroup, exchanging
// values with subgroup shuffles (shared memory and its barriers were the scan's cost on
// llvmpipe). The cluster must fit in the smallest subgroup the driver may pick.
BlockScanPlan planColumns(uint32_t lanes, const DeviceCaps& caps, bool scan) {
    const char* what = scan ? "block scan" : "block reduction";
    constexpr VkSubgroupFeatureFlags needed = VK_SUBGROUP_FEATURE_BASIC_BIT | VK_SUBGROUP_FEATURE_SHUFFLE_RELATIVE_BIT;
    if ((caps.subgroupOperations & needed) != needed)
        fail(PSK_ERROR_UNSUPPORTED, what, " needs relative subgroup shuffles in compute shaders");
    const uint32_t workgroup = std::min<uint32_t>(kWorkgroup, caps.limits().maxComputeWorkGroupInvocations);
    const uint32_t minSubgroup = std::max<uint32_t>(1, caps.minSubgroupSize);
    if (workgroup % std::max<uint32_t>(1, caps.maxSubgroupSize) != 0)
        fail(PSK_ERROR_UNSUPPORTED, what, ": subgroups of ", caps.maxSubgroupSize, " do not divide a workgroup of ", workgroup);
    BlockScanPlan plan;
    plan.threads = std::min(lanes, minSubgroup);
    plan.columns = workgroup / plan.threads;
    const std::string perColumn = std::to_string(plan.threads);
    plan.kernel = scan ? columnsKernel<KernelId::BlockScan>(workgroup, plan.threads,
                                                            "causal: the exclusive prefix of the block states; " + perColumn +
                                                                " lanes per column (2 for t <= 4 blocks, else 8, at most the smallest subgroup)")
                       : columnsKernel<KernelId::BlockReduce>(workgroup, plan.threads,
                                                              "full: every block's state summed into block 0; " + perColumn +
                                                                  " lanes per column (4 for t <= 4 blocks, else 8, at most the smallest subgroup)");
    plan.maxGroupsX = caps.limits().maxComputeWorkGroupCount[0];
    plan.maxGroupsY = caps.limits().maxComputeWorkGroupCount[1];
    plan.maxGroupsZ = caps.limits().maxComputeWorkGroupCount[2];
    return plan;
}

constexpr uint32_t kMaxLoopIterations = 65535;

// `blocksPerIteration`: blocks a cluster takes per iteration of the shader's loop.
void dispatchColumns(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems, uint32_t blocksPerIteration, const char* what,
                     bool scan, const ScanInitial* initial = nullptr) {
    // Four adjacent columns per invocation (one vec4 access) whenever they tile the state; the
    // sequence stride blocks * elems is then a multiple of 16 bytes too.
    const bool vectorized = elems % 4 == 0 && states.offset % 16 == 0;
    const uint32_t columns = vectorized ? elems / 4 : elems;
    const uint32_t groups = (columns + plan.columns - 1) / plan.columns;
    const uint32_t groupsX = std::min(groups, plan.maxGroupsX);
    const uint32_t groupsY = (groups + groupsX - 1) / groupsX;
    if (groupsY > plan.maxGroupsY || sequences > plan.maxGroupsZ)
        fail(PSK_ERROR_TOO_LARGE, what, " of ", elems, " x ", sequences, " columns exceeds the device's dispatch limits");
    // llvmpipe silently ends an invocation's loops after 65535 iterations in all; the loop over
    // segments (scan, 2 blocks per lane) or blocks (reduction) is the shaders' only loop.
    if ((uint64_t(blocks) + blocksPerIteration - 1) / blocksPerIteration > kMaxLoopIterations)
        fail(PSK_ERROR_TOO_LARGE, what, " of ", blocks, " blocks exceeds ", kMaxLoopIterations, " loop iterations");
    kernel::BlockColumnsPush push{blocks, columns, groupsX, vectorized ? 1u : 0u};
    if (!scan) {
        kernel::BlockReduceBindings b;
        b.STATES = states;
        recordKernel(recorder, KernelPipeline{pipeline, KernelId::BlockReduce}, b, push, groupsX, groupsY, sequences);
        return;
    }
    kernel::BlockScanBindings b;
    b.STATES = states;
    if (!initial) {
        // block_scan.comp declares the initial prefix's bindings 1 and 2 and the tail's 3: the
        // states stand in.
        b.INIT_Z = states;
        b.INIT_H = states;
        b.TAIL = kernel::unwritten(states);
        recordKernel(recorder, KernelPipeline{pipeline, KernelId::BlockScan}, b, push, groupsX, groupsY, sequences);
        return;
    }
    push.init_row = initial->row;
    push.init_stride = initial->stride;
    push.init_base = initial->base;
    push.init_h = initial->addH ? 1u : 0u;
    push.tail_mode = static_cast<uint32_t>(initial->tailMode);
    const bool tail = initial->tailMode != ScanInitial::Tail::None;
    if (tail) {
        const uint64_t parts = initial->tailMode == ScanInitial::Tail::Split ? 2 : 1;
        const uint64_t need = parts * sequences * uint64_t(elems) * 4;
        if (initial->tail.size < need) fail(PSK_ERROR_INTERNAL, "block scan: tail range of ", initial->tail.size, " bytes, ", need, " needed");
    }
    // Without h (or a tail) the binding is still declared by the shader: z stands in.
    b.INIT_Z = initial->z;
    b.INIT_H = initial->addH ? initial->h : initial->z;
    b.TAIL = tail ? kernel::Bound(initial->tail) : kernel::unwritten(initial->z);
    recordKernel(recorder, KernelPipeline{pipeline, KernelId::BlockScan}, b, push, groupsX, groupsY, sequences);
}

}  // namespace

// Tree lanes per column: 8 (a segment of 16 blocks, two per lane), llvmpipe's subgroup size, so
// that a workgroup of 128 invocations spans 16 columns (64 floats with vec4) and its accesses to a
// row of blocks stay within a few cache lines; one-column workgroups of 128 lanes were strided
// gathers and made the scan the largest stage at n = 32k. Longer scans take more segments, each
// one a Blelloch tree, with a carry between them.
//
// What was measured on lavapipe (4 sequences x 128 blocks x 34320 floats, CPU time of the
// dispatch, which is steadier than wall time on the shared 2-core machine): the shared-memory
// tree with 8 lanes and ~12 barriers per segment ~850 ms; subgroup shuffles with the tree as
// [[unroll]] loops over a register array ~210 ms (llvmpipe kept the loops, so the array lived in
// memory); the same tree written out level by level ~45 ms, close to a C++ loop that stores the
// same pattern float by float. Four blocks per lane, or xor shuffles (one per down-sweep level instead of two),
// made no difference beyond the noise in the loop version and were not kept.
constexpr uint32_t kMaxScanLanes = 8;

BlockScanPlan planBlockScan(uint32_t blocks, const DeviceCaps& caps) {
    // Two lane counts only (2 for t <= 4, else 8), so that the attention object can create every
    // pipeline up front.
    return planColumns(blocks <= 4 ? 2 : kMaxScanLanes, caps, true);
}

BlockScanPlan planBlockReduce(uint32_t blocks, const DeviceCaps& caps) {
    return planColumns(blocks <= 4 ? 4 : 8, caps, false);  // two variants, created up front
}

std::vector<BlockScanPlan> allBlockScanPlans(bool causal, const DeviceCaps& caps) {
    // One block count on each side of the rule's threshold (t <= 4) gives every variant.
    std::vector<BlockScanPlan> plans;
    for (uint32_t blocks : {4u, 5u}) plans.push_back(causal ? planBlockScan(blocks, caps) : planBlockReduce(blocks, caps));
    return plans;
}

void recordBlockScan(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                     uint32_t sequences, uint32_t blocks, uint32_t elems, const ScanInitial* initial) {
    if (blocks == 0 || elems == 0 || sequences == 0) return;
    if (initial) {
        // Z_0 is the initial prefix, not zero: the shader writes it (one segment for one block).
        if (initial->row == 0 || initial->stride == 0 || elems % initial->stride != 0)
            fail(PSK_ERROR_INTERNAL, "block scan: bad initial prefix layout");
        dispatchColumns(recorder, pipeline, plan, states, sequences, blocks, elems, 2 * plan.threads, "block scan", true, initial);
        return;
    }
    if (blocks == 1) {
        // Nothing before the first block: its prefix is zero.
        recorder.fill(states, uint64_t(sequences) * elems * 4, 0);
        return;
    }
    dispatchColumns(recorder, pipeline, plan, states, sequences, blocks, elems, 2 * plan.threads, "block scan", true);
}

void recordBlockReduce(Recorder& recorder, VkPipeline pipeline, const BlockScanPlan& plan, BufferRange states,
                       uint32_t sequences, uint32_t blocks, uint32_t elems) {
    if (blocks <= 1 || elems == 0 || sequences == 0) return;  // one block is its own sum
    dispatchColumns(recorder, pipeline, plan, states, sequences, blocks, elems, plan.threads, "block reduction", false);
}

}  // namespace psk
