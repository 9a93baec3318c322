#version 450
// Exclusive prefix sum over block states, work-efficient (Blelloch 1990): Z_l = sum_{j<l} H_j,
// in place. States are [sequences][blocks][elems] float32; every element column (one entry of the
// feature x (dv + 1) state matrix of one sequence-head) is an independent scan over the blocks.
//
// A workgroup scans COLUMNS adjacent columns at once (invocation (x, y) = (column, tree lane)), so
// loads and stores of a row of blocks are contiguous. The blocks are taken in segments of
// 2 * THREADS, each scanned in shared memory by an up-sweep (reduce) and a down-sweep, plus the
// carry of the segments before. No invocation walks the blocks one by one (a requirement of the
// design, so that the depth is logarithmic on a GPU); the loop over segments is
// ceil(t / (2 * THREADS)) long. (A sequential walk per column was measured faster on llvmpipe for
// t <= 256, 3 ms against 75 ms at n = 4k, because its barriers are costly; it is deliberately not
// used.)

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 1, local_size_y_id = 0) in;
layout(constant_id = 0) const uint THREADS = 128;  // tree lanes per column, a power of two
layout(constant_id = 1) const uint COLUMNS = 1;    // columns per workgroup

layout(std430, binding = 0) buffer States { float states[]; };

layout(push_constant) uniform Params {
    uint blocks;     // t: blocks per sequence-head
    uint elems;      // entries of one block state
    uint groups_x;   // workgroups along x (column groups are split over x and y)
} params;

const uint SEGMENT = 2u * THREADS;
shared float tree[SEGMENT * COLUMNS];

void main() {
    const uint col = gl_LocalInvocationID.x, lid = gl_LocalInvocationID.y;
    const uint column = (gl_WorkGroupID.y * params.groups_x + gl_WorkGroupID.x) * COLUMNS + col;
    const bool in_range = column < params.elems;  // idle lanes still take part in the barriers
    const uint base = gl_WorkGroupID.z * params.blocks * params.elems + column;

    float carry = 0.0;
    for (uint seg = 0u; seg < params.blocks; seg += SEGMENT) {
        const uint i0 = seg + lid, i1 = seg + lid + THREADS;
        tree[lid * COLUMNS + col] = in_range && i0 < params.blocks ? states[base + i0 * params.elems] : 0.0;
        tree[(lid + THREADS) * COLUMNS + col] = in_range && i1 < params.blocks ? states[base + i1 * params.elems] : 0.0;

        // Up-sweep: after level d, tree[k * 2^(d+1) - 1] holds the sum of its 2^(d+1) leaves.
        uint offset = 1u;
        [[unroll]] for (uint width = THREADS; width > 0u; width >>= 1u) {
            barrier();
            if (lid < width) {
                const uint a = offset * (2u * lid + 1u) - 1u;
                const uint b = offset * (2u * lid + 2u) - 1u;
                tree[b * COLUMNS + col] += tree[a * COLUMNS + col];
            }
            offset <<= 1u;
        }
        barrier();
        const float total = tree[(SEGMENT - 1u) * COLUMNS + col];
        barrier();
        if (lid == 0u) tree[(SEGMENT - 1u) * COLUMNS + col] = 0.0;

        // Down-sweep: push prefix sums back down the tree.
        [[unroll]] for (uint width = 1u; width < SEGMENT; width <<= 1u) {
            offset >>= 1u;
            barrier();
            if (lid < width) {
                const uint a = offset * (2u * lid + 1u) - 1u;
                const uint b = offset * (2u * lid + 2u) - 1u;
                const float left = tree[a * COLUMNS + col];
                tree[a * COLUMNS + col] = tree[b * COLUMNS + col];
                tree[b * COLUMNS + col] += left;
            }
        }
        barrier();
        if (in_range && i0 < params.blocks) states[base + i0 * params.elems] = tree[lid * COLUMNS + col] + carry;
        if (in_range && i1 < params.blocks) states[base + i1 * params.elems] = tree[(lid + THREADS) * COLUMNS + col] + carry;
        carry += total;
        barrier();  // tree is rewritten by the next segment
    }
}
