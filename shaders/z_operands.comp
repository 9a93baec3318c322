#version 450
// The prefix states as the cooperative output's B operands, packed once per block (docs/MATH.md,
// "Products on 16-bit matrix units"; the output's Z_PACKED, polysketch_output_coopmat.comp).
//
// Without it, every workgroup of the cooperative output turns each chunk of FEAT_CHUNK rows of Z
// into operands itself: a pass over the chunk for its largest |element| (the power-of-two range
// scale), then a staging pass that scales, splits into hi + lo and stores both into shared
// memory, three barriers per chunk. A 256-row block has 256 / TILE_M workgroups that all do the
// same to the same Z (8 at TILE_M = 32), and the fourth H200 run's ablations put those two passes
// at 0.48 + 0.88 of the output's 4.77 ms at 32k (docs/MODEL.md, "Z operands packed once per
// block"). This kernel does it once per (sequence, block, chunk), after the prefix; the output then
// loads its B fragments straight from these records (L2-resident: a block's records are ~170 KB
// at r = 32, dv = 64) and keeps one barrier per chunk for its own phi(q) operands.
//
// One workgroup per record: grid x = chunk (ceil(F / FEAT_CHUNK)), y = block, z = sequence.
// Record (uvec4 units, eight 16-bit operands each, as the cooperative loads take them):
//   [0]                      x: the chunk's scale (float bits): a power of two, operand_scale of
//                            its largest |Z| over the chunk's features and columns 0..dv;
//   [1, 1 + PART)            hi: NC columns of FEAT_CHUNK operands, B column-major (feature f,
//                            column c at operand 8 (1 + c FEAT_CHUNK / 8) + f):
//                            CM_SPLIT_HIGH(Z[f][c] scale), exact in the operand type, zero past
//                            feature F or column dv;
//   [1 + PART, 1 + 2 PART)   lo: the same columns, Z[f][c] scale - hi rounded to the operand type.
// Column-major because the matrix units take B's K dimension (the features) contiguous per lane:
// AMD's a column of 16 per lane (two 16-byte loads, where a row-major B is sixteen 16-bit ones),
// NVIDIA's pairs of consecutive K (32-bit loads, where row-major is 16-bit ones); docs/MODEL.md,
// "Z records column by column". A uvec4 unit holds 8 consecutive features of one column
// (FEAT_CHUNK is a multiple of the product's K, itself of 8).
// These are the operands the output staged itself (operands.glsl: the same scale and split),
// except that lo is rounded by packHalf2x16 here and by the operand conversion there, both to
// nearest on the devices the library has met.
//
// WALK = 1: the prefix and the packing in one pass (docs/MODEL.md, "The floor of each
// architecture"). The input is the block states H_l as block_states.comp wrote them, no prefix
// taken: the scan's in-place write of every Z_l and this kernel's read of it back (2 x 294 MB at
// 32k, H = 16, r = 32, dv = 64) are not needed. A record's scale is the largest |Z_l| over the whole
// chunk, a reduction across columns that the Blelloch scan's column clusters (in different
// workgroups) cannot make, so here one workgroup owns a chunk of one sequence and walks its
// blocks in order: grid x = chunk, y = 1, z = sequence. Each invocation keeps the running prefix of
// the record units it owns (UNITS of 8 columns) in registers, Z_0 = 0 and Z_{l+1} = Z_l + H_l in
// float32 in that order (the walking block states' order, not the scan's tree: the float32 sums may
// differ from the scan's in their last bits); per block it takes the chunk's maximum (one shared
// atomicMax per invocation, one barrier), writes the record of Z_l and adds H_l, whose loads it
// issued before the barrier. The maximum rotates through three shared words, so that one barrier
// per block orders each word's reset, its atomics and its reads (the reset of the word for block
// l + 2 waits for block l's barrier, after which nobody reads it for block l - 1, and comes before
// block l + 1's barrier, after which the first atomic for block l + 2 can come). The planner takes it
// where enough workgroups stream at once (PolysketchPlan::prefixPackMinGroups) and no decode state
// is continued; a continued state's initial prefix and tail stay the scan's.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
#include "interface/z_operands.h"
PSK_DECLARE_SPECS(PSK_Z_OPERANDS_SPEC)
PSK_DECLARE_BINDINGS(PSK_Z_OPERANDS_BINDINGS)
#include "operands.glsl"

layout(std430, binding = BINDING_STATES) readonly buffer States { float states[]; };
layout(std430, binding = BINDING_OPERANDS) writeonly buffer Operands { uvec4 operands[]; };

const uint COL16 = FEAT_CHUNK / 8u;    // uvec4 per operand column
const uint PART = NC * COL16;          // uvec4 per part (hi or lo)
const uint RECORD = 1u + 2u * PART;    // uvec4 per record

shared uint max_bits;
shared uint walk_max[3];  // WALK: the maximum of blocks l, l + 1, l + 2 (mod 3)

// Two values as the operand type's 16 bits each, rounded to nearest (exact for a high part).
uint pack_pair(float a, float b) {
#if defined(OPERAND_F16)
    return packHalf2x16(vec2(a, b));
#else
    uvec2 u = floatBitsToUint(vec2(a, b));
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (u.x >> 16) | (u.y & 0xFFFF0000u);
#endif
}

// WALK: the record units an invocation owns (unit e = lid + k THREADS of the hi part: column
// e / COL16, features 8 (e % COL16) .. + 7; at chunks of 32 a warp's load reads 8 consecutive
// columns of 4 rows, whole 32-byte sectors).
const uint UNITS = (PART + THREADS - 1u) / THREADS;

void walk_blocks() {
    const uint chunk = gl_WorkGroupID.x, seq = gl_WorkGroupID.z;
    const uint lid = gl_LocalInvocationID.x;
    const uint f0 = chunk * FEAT_CHUNK;
    const uint flen = min(FEAT_CHUNK, params.features - f0);
    vec4 run[2u * UNITS];  // the running prefix Z_l of the owned units, 8 columns each
    [[unroll]] for (uint k = 0u; k < 2u * UNITS; ++k) run[k] = vec4(0.0);
    if (lid < 3u) walk_max[lid] = 0u;
    barrier();
    for (uint block = 0u; block < params.blocks; ++block) {
        const uint z_base = ((seq * params.state_blocks + block) * params.features + f0) * Z_STRIDE;
        const uint rec = ((seq * params.blocks + block) * gl_NumWorkGroups.x + chunk) * RECORD;
        // H_l of the owned units, loaded before the barrier (every lane loads a valid element,
        // selected after: a load under its condition is waited for alone, staging.glsl).
        vec4 h[2u * UNITS];
        float z_max = 0.0;
        [[unroll]] for (uint k = 0u; k < UNITS; ++k) {
            const uint e = lid + k * THREADS, c = e / COL16, fu = (e % COL16) * 8u;
            [[unroll]] for (uint j = 0u; j < 8u; ++j) {
                const uint f = fu + j;
                const float x = states[z_base + min(f, flen - 1u) * Z_STRIDE + min(c, VALUE_DIM)];
                h[2u * k + j / 4u][j % 4u] = e < PART && f < flen && c <= VALUE_DIM ? x : 0.0;
            }
            z_max = max(z_max, max(max(abs(run[2u * k].x), abs(run[2u * k].y)), max(abs(run[2u * k].z), abs(run[2u * k].w))));
            z_max = max(z_max, max(max(abs(run[2u * k + 1u].x), abs(run[2u * k + 1u].y)),
                                   max(abs(run[2u * k + 1u].z), abs(run[2u * k + 1u].w))));
        }
        atomicMax(walk_max[block % 3u], floatBitsToUint(z_max));  // non-negative floats order as their bits
        barrier();
        const float scale = operand_scale(uintBitsToFloat(walk_max[block % 3u]));
        if (lid == 0u) {
            walk_max[(block + 2u) % 3u] = 0u;
            operands[rec] = uvec4(floatBitsToUint(scale), 0u, 0u, 0u);
        }
        [[unroll]] for (uint k = 0u; k < UNITS; ++k) {
            const uint e = lid + k * THREADS;
            uint hi[4], lo[4];
            [[unroll]] for (uint j = 0u; j < 4u; ++j) {
                float x[2], hs[2];
                [[unroll]] for (uint s = 0u; s < 2u; ++s) {
                    x[s] = run[2u * k + j / 2u][(2u * j + s) % 4u] * scale;
                    hs[s] = CM_SPLIT_HIGH(x[s]);
                }
                hi[j] = pack_pair(hs[0], hs[1]);
                lo[j] = pack_pair(x[0] - hs[0], x[1] - hs[1]);
            }
            if (e < PART) {
                operands[rec + 1u + e] = uvec4(hi[0], hi[1], hi[2], hi[3]);
                operands[rec + 1u + PART + e] = uvec4(lo[0], lo[1], lo[2], lo[3]);
            }
            run[2u * k] += h[2u * k];
            run[2u * k + 1u] += h[2u * k + 1u];
        }
    }
}

void main() {
    if (WALK != 0u) {
        walk_blocks();
        return;
    }
    const uint chunk = gl_WorkGroupID.x, block = gl_WorkGroupID.y, seq = gl_WorkGroupID.z;
    const uint lid = gl_LocalInvocationID.x;
    const uint f0 = chunk * FEAT_CHUNK;
    const uint flen = min(FEAT_CHUNK, params.features - f0);
    const uint z_base = ((seq * params.state_blocks + block) * params.features + f0) * Z_STRIDE;
    const uint rec = ((seq * params.blocks + block) * gl_NumWorkGroups.x + chunk) * RECORD;

    if (lid == 0u) max_bits = 0u;
    barrier();
    float z_max = 0.0;
    for (uint i = lid; i < flen * (VALUE_DIM + 1u); i += THREADS)
        z_max = max(z_max, abs(states[z_base + (i / (VALUE_DIM + 1u)) * Z_STRIDE + i % (VALUE_DIM + 1u)]));
    atomicMax(max_bits, floatBitsToUint(z_max));  // non-negative floats order as their bits
    barrier();
    const float scale = operand_scale(uintBitsToFloat(max_bits));
    if (lid == 0u) operands[rec] = uvec4(floatBitsToUint(scale), 0u, 0u, 0u);

    for (uint e = lid; e < PART; e += THREADS) {
        const uint c = e / COL16, fu = (e % COL16) * 8u;
        uint hi[4], lo[4];
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            float x[2], h[2];
            [[unroll]] for (uint s = 0u; s < 2u; ++s) {
                const uint f = fu + 2u * j + s;
                x[s] = f < flen && c <= VALUE_DIM ? states[z_base + f * Z_STRIDE + c] * scale : 0.0;
                h[s] = CM_SPLIT_HIGH(x[s]);
            }
            hi[j] = pack_pair(h[0], h[1]);
            lo[j] = pack_pair(x[0] - h[0], x[1] - h[1]);
        }
        operands[rec + 1u + e] = uvec4(hi[0], hi[1], hi[2], hi[3]);
        operands[rec + 1u + PART + e] = uvec4(lo[0], lo[1], lo[2], lo[3]);
    }
}
