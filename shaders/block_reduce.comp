#version 450
// Full (non-causal) polysketch: Z = sum over all blocks of H_l, one tree reduction per column of
// the [sequences][blocks][elems] float32 states, written in place into block 0. A column is
// reduced by a cluster of LANES adjacent invocations of one subgroup: lane p first sums the blocks
// p, p + LANES, ... (ceil(t / LANES) of them; consecutive lanes read consecutive blocks), then the
// lanes' partial sums are combined by a tree of subgroup shuffles into lane 0.
//
// Same layout choices as block_scan.comp, for the same llvmpipe reasons: no shared memory or
// barriers (each barrier is a coroutine switch per subgroup there), and one vec4 per invocation
// (4 adjacent columns) when elems % 4 == 0, since a buffer access costs about the same whatever
// its width. The mapping goes through gl_SubgroupID / gl_SubgroupInvocationID and assumes full
// subgroups.

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle_relative : require

layout(local_size_x_id = 0) in;
#include "interface/block_scan.h"
PSK_DECLARE_SPECS(PSK_BLOCK_REDUCE_SPEC)
PSK_DECLARE_BINDINGS(PSK_BLOCK_REDUCE_BINDINGS)

layout(std430, binding = BINDING_STATES) buffer States { float states[]; };
layout(std430, binding = BINDING_STATES) buffer States4 { vec4 states4[]; };

// Tree levels written out, as in block_scan.comp (llvmpipe keeps such loops and counts their
// iterations against its 65535 limit); levels at or above LANES fold away. Lanes p < w read lane
// p + w, inside the cluster; lane 0 ends with the column's total. Up to 32 lanes.
#define REDUCE_LEVEL(w) \
    if (LANES > w) sum += subgroupShuffleDown(sum, w);
#define REDUCE(T, DATA)                                                                  \
    {                                                                                    \
        T sum = T(0.0);                                                                  \
        if (inRange)                                                                      \
            for (uint l = lane; l < params.blocks; l += LANES) sum += DATA[base + l * params.columns]; \
        REDUCE_LEVEL(16u) REDUCE_LEVEL(8u) REDUCE_LEVEL(4u) REDUCE_LEVEL(2u) REDUCE_LEVEL(1u)   \
        if (inRange && lane == 0u) DATA[base] = sum;                                      \
    }

void main() {
    const uint lane = gl_SubgroupInvocationID & (LANES - 1u);
    const uint clustersPerSubgroup = gl_SubgroupSize / LANES;
    const uint col = gl_SubgroupID * clustersPerSubgroup + gl_SubgroupInvocationID / LANES;
    const uint columnsPerGroup = WORKGROUP / LANES;
    const uint column = (gl_WorkGroupID.y * params.groups_x + gl_WorkGroupID.x) * columnsPerGroup + col;
    const bool inRange = column < params.columns;  // lanes past it still take part in the shuffles
    const uint base = gl_WorkGroupID.z * params.blocks * params.columns + column;

    if (params.vectorized != 0u)
        REDUCE(vec4, states4)
    else
        REDUCE(float, states)
}
