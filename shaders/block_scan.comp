#version 450
// Exclusive prefix sum over block states, work-efficient (Blelloch 1990): Z_l = sum_{j<l} H_j,
// in place. States are [sequences][blocks][elems] float32; every element column (one entry of the
// feature x (dv + 1) state matrix of one sequence-head) is an independent scan over the blocks.
//
// A column is scanned by a cluster of LANES invocations of one subgroup (LANES a power of two
// dividing the subgroup size), in segments of 2 * LANES blocks: each lane holds two consecutive
// blocks in registers (the two leaves of the classic formulation). The Blelloch up-sweep runs
// inside the lane, then across the lanes of the cluster with subgroup shuffles, and the down-sweep
// back. The down-sweep's root is seeded with the carry of the segments before instead of 0, so
// the carry lives in the root lane only. No invocation walks the blocks one by one (a requirement
// of the design, so that the depth is logarithmic on a GPU); the loop over segments is
// ceil(t / (2 * LANES)) long: at most 4096 iterations for the 65535 blocks a dispatch allows,
// well inside llvmpipe's limit of 65535 loop iterations per invocation.
//
// Why subgroups and no shared memory: on llvmpipe every barrier suspends and resumes each
// subgroup of the workgroup (a coroutine switch), and the shared-memory tree needed ~12 of them per
// segment, which made the scan cost ~0.6 s at n = 32k for 70 MB of states (now ~30 ms). Shuffles
// are register operations there. Why vec4: llvmpipe turns every buffer access into a loop over the
// lanes, so when elems % 4 == 0 (push constant `vectorized`; the host also wants the binding
// offset 16-byte aligned) one invocation scans 4 adjacent columns with one vec4 load/store per
// block; otherwise the scalar path scans one column (same states: ~40 ms against ~70 ms of CPU
// time). Both paths are in one module because the pipeline is chosen before the number of
// columns is known (blockScanShader() takes no arguments).
//
// Optional initial prefix (push constant init_row != 0; a forward that continues a decode state,
// docs/DECODING.md "State passing"): Z_l = z + sum_{j<l} H_j, with z the state's running sum
// (bindings 1 and 2 hold z and h in the state's [sequence][F][dv + 1] rows); it seeds the carry,
// and with init_h the unfinished block's sum h joins H_0 in lane 0 of the first segment. Z_0 = z
// is then written too (the host dispatches even for one block).
//
// Optional tail (push constant tail_mode, with an initial prefix only): the lane holding the last
// block also writes what the decode state keeps after the call into binding 3: the inclusive
// prefix Z_{t-1} + H_{t-1} (mode 1), or Z_{t-1} and the last block's own H_{t-1} (mode 2: local
// exact with the last block unfinished, which stays apart as h). Both are values this scan has at
// hand; the alternative, folding the last block's b rows of phi(k)[v | 1] again after the
// forward, costs ~b times more work per call. The tail keeps the states' padded rows (one vec4
// store per invocation; the host copies the dv + 1 columns into the state): writing the state's
// own layout, with an index division and a scalar store per column, cost the scan ~2 ms per call
// at b = 256, r = 32, dv = 64, 4 heads on lavapipe, the padded rows ~1.2 ms.
//
// The mapping of invocations to (column, lane) goes through gl_SubgroupID and
// gl_SubgroupInvocationID, so it holds whatever order a driver packs invocations into subgroups;
// it assumes full subgroups (the workgroup size is a multiple of every subgroup size).

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle_relative : require

layout(local_size_x_id = 0) in;
#include "interface/block_scan.h"
PSK_DECLARE_SPECS(PSK_BLOCK_SCAN_SPEC)
PSK_DECLARE_BINDINGS(PSK_BLOCK_SCAN_BINDINGS)
const uint SEGMENT = 2u * LANES;                     // blocks per segment, two per lane

// The same buffer seen as floats (scalar path) and as vec4 (vectorized path).
layout(std430, binding = BINDING_STATES) buffer States { float states[]; };
layout(std430, binding = BINDING_STATES) buffer States4 { vec4 states4[]; };
// The optional initial prefix (params.init_row != 0): a decode state's running sum z, where every
// prefix starts, and the unfinished block's sum h, which joins block 0 (docs/DECODING.md, "State
// passing"). Rows of init_row floats, F rows per sequence; bound to any valid range when unused.
layout(std430, binding = BINDING_INIT_Z) readonly buffer InitZ { float init_z[]; };
layout(std430, binding = BINDING_INIT_H) readonly buffer InitH { float init_h[]; };
// The tail (params.tail_mode != 0): [part][sequence][elems] floats, the states' rows (padding
// columns included); float and vec4 views as for the states; bound to any valid range when unused.
layout(std430, binding = BINDING_TAIL) writeonly buffer Tail { float tail[]; };
layout(std430, binding = BINDING_TAIL) writeonly buffer Tail4 { vec4 tail4[]; };

// Element e (< elems) of sequence `seq`'s initial z (from_h false) or h, 0 in the padding columns.
float initial(bool from_h, uint seq, uint e, uint features) {
    const uint f = e / params.init_stride, c = e % params.init_stride;
    if (c >= params.init_row) return 0.0;
    const uint i = params.init_base + (seq * features + f) * params.init_row + c;
    return from_h ? init_h[i] : init_z[i];
}

// The tail (see main): part 0 at element `i` of [sequence][elems], part 1 after all sequences.
#define WRITE_TAIL(DATA, i, prefix, own)                               \
    if (params.tail_mode == 1u) {                                      \
        DATA[i] = prefix + own;                                        \
    } else {                                                           \
        DATA[i] = prefix;                                              \
        DATA[gl_NumWorkGroups.z * params.columns + (i)] = own;         \
    }

// The tree is written out level by level, without loops: llvmpipe does not unroll these loops
// (it kept them even with [[unroll]]), and its 65535-iteration limit counts every inner
// iteration, which cut the scan short at ~55k blocks. Levels at or above LANES fold away at
// specialisation. Up to 32 lanes.
//
// Up-sweep level w: the right child of each pair of subtrees of w lanes adds its left sibling.
#define UP_LEVEL(T, w)                                                   \
    if (LANES > w) {                                                     \
        const T left = subgroupShuffleUp(s, w);                          \
        if (((lane + 1u) & (2u * w - 1u)) == 0u) s += left;              \
    }
// Down-sweep level w: the left child takes its parent's prefix, the right child (which holds the
// parent's prefix) adds the left child's subtree sum.
#define DOWN_LEVEL(T, w)                                                 \
    if (LANES > w) {                                                     \
        const T fromLeft = subgroupShuffleUp(s, w);                      \
        const T fromRight = subgroupShuffleDown(s, w);                   \
        if (((lane + 1u) & (2u * w - 1u)) == 0u) s += fromLeft;          \
        else if (((lane + 1u + w) & (2u * w - 1u)) == 0u) s = fromRight; \
    }

// Blelloch scan of one segment, T float or vec4 and DATA the matching view of the buffer. Lane
// `lane` holds blocks l0 = seg + 2 lane and l0 + 1. `carry` (meaningful in the cluster's last lane,
// the root, only) is the sum of the segments before; it is advanced by this segment's total.
#define SCAN_SEGMENT(T, DATA)                                                                    \
    {                                                                                            \
        const uint l0 = seg + 2u * lane;                                                         \
        const bool has0 = inRange && l0 < params.blocks, has1 = inRange && l0 + 1u < params.blocks; \
        /* Both loads in every lane (a block and column that exist), selected after: a load */      \
        /* under its condition is waited for alone (shaders/staging.glsl). */                       \
        const T x0 = DATA[load_base + min(l0, params.blocks - 1u) * params.columns];             \
        const T x1 = DATA[load_base + min(l0 + 1u, params.blocks - 1u) * params.columns];        \
        const T a = (has0 ? x0 : T(0.0)) + (seg == 0u ? first : T(0.0));                        \
        const T b = has1 ? x1 : T(0.0);                                                          \
        T s = a + b; /* up-sweep inside the lane */                                              \
        UP_LEVEL(T, 1u) UP_LEVEL(T, 2u) UP_LEVEL(T, 4u) UP_LEVEL(T, 8u) UP_LEVEL(T, 16u)         \
        if (lane == LANES - 1u) { /* root: total to the carry, carry as the root's prefix */    \
            const T total = s;                                                                   \
            s = carry;                                                                           \
            carry += total;                                                                      \
        }                                                                                        \
        DOWN_LEVEL(T, 16u) DOWN_LEVEL(T, 8u) DOWN_LEVEL(T, 4u) DOWN_LEVEL(T, 2u) DOWN_LEVEL(T, 1u) \
        /* down-sweep inside the lane: s is the prefix of block l0 */                            \
        if (has0) DATA[base + l0 * params.columns] = s;                                          \
        if (has1) DATA[base + (l0 + 1u) * params.columns] = s + a;                               \
    }

void main() {
    const uint lane = gl_SubgroupInvocationID & (LANES - 1u);
    const uint clustersPerSubgroup = gl_SubgroupSize / LANES;
    const uint col = gl_SubgroupID * clustersPerSubgroup + gl_SubgroupInvocationID / LANES;
    const uint columnsPerGroup = WORKGROUP / LANES;
    const uint column = (gl_WorkGroupID.y * params.groups_x + gl_WorkGroupID.x) * columnsPerGroup + col;
    // Lanes past the last column still take part in the shuffles, which must see every lane active.
    const bool inRange = column < params.columns;
    const uint base = gl_WorkGroupID.z * params.blocks * params.columns + column;
    // The column every lane loads from: past the last column, the last one (read, not kept).
    const uint load_base = gl_WorkGroupID.z * params.blocks * params.columns + min(column, params.columns - 1u);

    // The initial prefix seeds the carry (read by the root lane only) and `first` is added to
    // block 0 (lane 0 of the first segment); both zero without one.
    const bool init = params.init_row != 0u && inRange;
    const bool add_first = init && params.init_h != 0u && lane == 0u;
    const uint seq = gl_WorkGroupID.z;
    const uint elems = params.vectorized != 0u ? params.columns * 4u : params.columns;
    const uint features = params.init_stride != 0u ? elems / params.init_stride : 0u;
    // The tail: the lane that will scan the last block reads that block's own sum before the loop
    // (the sum `a` or `b` of the segment, first included for block 0) and its exclusive prefix,
    // its own write, after it. Outside the loop on purpose: llvmpipe runs a branch's body under a
    // lane mask whether or not a lane takes it, and the tail written inside the segment loop cost
    // the scan 15 -> 23 ms at n = 16384 in one call without a tail (b = 256, r = 32, 4 heads) and
    // 22 -> 44 ms over 4 calls of 4096 with one; here 22 -> 27.5 ms for the 4 calls.
    const uint last = params.blocks - 1u;
    const bool holds_last = init && params.tail_mode != 0u && lane == (last % SEGMENT) / 2u;
    if (params.vectorized != 0u) {
        const uint e = 4u * column;
        vec4 carry = vec4(0.0), first = vec4(0.0);
        if (init)
            carry = vec4(initial(false, seq, e, features), initial(false, seq, e + 1u, features),
                         initial(false, seq, e + 2u, features), initial(false, seq, e + 3u, features));
        if (add_first)
            first = vec4(initial(true, seq, e, features), initial(true, seq, e + 1u, features),
                         initial(true, seq, e + 2u, features), initial(true, seq, e + 3u, features));
        vec4 own = vec4(0.0);
        if (holds_last) own = states4[base + last * params.columns] + (last == 0u ? first : vec4(0.0));
        for (uint seg = 0u; seg < params.blocks; seg += SEGMENT) SCAN_SEGMENT(vec4, states4)
        if (holds_last) { WRITE_TAIL(tail4, seq * params.columns + column, states4[base + last * params.columns], own) }
    } else {
        float carry = init ? initial(false, seq, column, features) : 0.0;
        const float first = add_first ? initial(true, seq, column, features) : 0.0;
        float own = 0.0;
        if (holds_last) own = states[base + last * params.columns] + (last == 0u ? first : 0.0);
        for (uint seg = 0u; seg < params.blocks; seg += SEGMENT) SCAN_SEGMENT(float, states)
        if (holds_last) { WRITE_TAIL(tail, seq * params.columns + column, states[base + last * params.columns], own) }
    }
}
