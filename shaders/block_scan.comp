#version 450
// Exclusive prefix sum over block states, work-efficient (Blelloch 1990): Z_l = sum_{j<l} H_l,
// in place. States are [sequences][blocks][elems] float32; every element column (one entry of the
// feature x (dv + 1) state matrix of one sequence-head) is an independent scan over the blocks.
//
// One workgroup scans one column: the blocks are taken in segments of 2 * THREADS, each scanned
// in shared memory by an up-sweep (reduce) and a down-sweep, plus a carry of the segments before.
// No invocation walks the blocks one by one; the loop over segments is ceil(t / (2 * THREADS)) long.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
layout(constant_id = 0) const uint THREADS = 128;  // a power of two

layout(std430, binding = 0) buffer States { float states[]; };

layout(push_constant) uniform Params {
    uint blocks;     // t: blocks per sequence-head
    uint elems;      // entries of one block state
    uint columns_x;  // workgroups along x (columns are split over x and y)
} params;

const uint SEGMENT = 2u * THREADS;
shared float tree[SEGMENT];

void main() {
    const uint column = gl_WorkGroupID.y * params.columns_x + gl_WorkGroupID.x;
    if (column >= params.elems) return;  // uniform across the workgroup
    const uint sequence = gl_WorkGroupID.z;
    const uint base = sequence * params.blocks * params.elems + column;
    const uint lid = gl_LocalInvocationID.x;

    float carry = 0.0;
    for (uint seg = 0u; seg < params.blocks; seg += SEGMENT) {
        const uint i0 = seg + lid, i1 = seg + lid + THREADS;
        tree[lid] = i0 < params.blocks ? states[base + i0 * params.elems] : 0.0;
        tree[lid + THREADS] = i1 < params.blocks ? states[base + i1 * params.elems] : 0.0;

        // Up-sweep: after level d, tree[k * 2^(d+1) - 1] holds the sum of its 2^(d+1) leaves.
        uint offset = 1u;
        [[unroll]] for (uint width = THREADS; width > 0u; width >>= 1u) {
            barrier();
            if (lid < width) {
                const uint a = offset * (2u * lid + 1u) - 1u;
                const uint b = offset * (2u * lid + 2u) - 1u;
                tree[b] += tree[a];
            }
            offset <<= 1u;
        }
        barrier();
        const float total = tree[SEGMENT - 1u];
        barrier();
        if (lid == 0u) tree[SEGMENT - 1u] = 0.0;

        // Down-sweep: push prefix sums back down the tree.
        [[unroll]] for (uint width = 1u; width < SEGMENT; width <<= 1u) {
            offset >>= 1u;
            barrier();
            if (lid < width) {
                const uint a = offset * (2u * lid + 1u) - 1u;
                const uint b = offset * (2u * lid + 2u) - 1u;
                const float left = tree[a];
                tree[a] = tree[b];
                tree[b] += left;
            }
        }
        barrier();
        if (i0 < params.blocks) states[base + i0 * params.elems] = tree[lid] + carry;
        if (i1 < params.blocks) states[base + i1 * params.elems] = tree[lid + THREADS] + carry;
        carry += total;
        barrier();  // tree is rewritten by the next segment
    }
}
