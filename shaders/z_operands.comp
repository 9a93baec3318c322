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
//   [1, 1 + PART)            hi: FEAT_CHUNK rows of NC operands (row f, column c at operand
//                            8 (1 + f NC / 8) + c): CM_SPLIT_HIGH(Z[f][c] scale), exact in the
//                            operand type, zero past feature F or column dv;
//   [1 + PART, 1 + 2 PART)   lo: the same rows, Z[f][c] scale - hi rounded to the operand type.
// These are the operands the output staged itself (operands.glsl: the same scale and split),
// except that lo is rounded by packHalf2x16 here and by the operand conversion there, both to
// nearest on the devices the library has met.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
#include "interface/z_operands.h"
PSK_DECLARE_SPECS(PSK_Z_OPERANDS_SPEC)
PSK_DECLARE_BINDINGS(PSK_Z_OPERANDS_BINDINGS)
#include "operands.glsl"

layout(std430, binding = BINDING_STATES) readonly buffer States { float states[]; };
layout(std430, binding = BINDING_OPERANDS) writeonly buffer Operands { uvec4 operands[]; };

const uint ROW16 = NC / 8u;            // uvec4 per operand row
const uint PART = FEAT_CHUNK * ROW16;  // uvec4 per part (hi or lo)
const uint RECORD = 1u + 2u * PART;    // uvec4 per record

shared uint max_bits;

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

void main() {
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
        const uint f = e / ROW16, c0 = (e % ROW16) * 8u;
        uint hi[4], lo[4];
        [[unroll]] for (uint j = 0u; j < 4u; ++j) {
            float x[2], h[2];
            [[unroll]] for (uint s = 0u; s < 2u; ++s) {
                const uint c = c0 + 2u * j + s;
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
