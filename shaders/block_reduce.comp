#version 450
// Full (non-causal) polysketch: Z = sum over all blocks of H_l, one tree reduction per column of
// the [sequences][blocks][elems] float32 states, written in place into block 0. A workgroup
// reduces COLUMNS adjacent columns (invocation (x, y) = (column, lane)): each lane first sums the
// blocks lane, lane + THREADS, ... (ceil(t / THREADS) of them), then the lanes' partial sums are
// combined by a tree in shared memory.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 1, local_size_y_id = 0) in;
layout(constant_id = 0) const uint THREADS = 64;  // lanes per column, a power of two
layout(constant_id = 1) const uint COLUMNS = 1;   // columns per workgroup

layout(std430, binding = 0) buffer States { float states[]; };

layout(push_constant) uniform Params {
    uint blocks;    // t
    uint elems;     // entries of one block state
    uint groups_x;  // workgroups along x (column groups are split over x and y)
} params;

shared float partial[THREADS * COLUMNS];

void main() {
    const uint col = gl_LocalInvocationID.x, lid = gl_LocalInvocationID.y;
    const uint column = (gl_WorkGroupID.y * params.groups_x + gl_WorkGroupID.x) * COLUMNS + col;
    const bool in_range = column < params.elems;  // idle lanes still take part in the barriers
    const uint base = gl_WorkGroupID.z * params.blocks * params.elems + column;

    float sum = 0.0;
    if (in_range)
        for (uint l = lid; l < params.blocks; l += THREADS) sum += states[base + l * params.elems];
    partial[lid * COLUMNS + col] = sum;
    [[unroll]] for (uint width = THREADS / 2u; width > 0u; width >>= 1u) {
        barrier();
        if (lid < width) partial[lid * COLUMNS + col] += partial[(lid + width) * COLUMNS + col];
    }
    barrier();
    if (in_range && lid == 0u) states[base] = partial[col];
}
