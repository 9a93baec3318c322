#version 450
// psk micro (tools only): staging 16-bit operands in shared memory, 2 bytes or 16 bytes per store.
// Each round, a workgroup stores one 64 x 64 tile of 16-bit operands (a key tile at h = 64) in the
// cooperative kernels' layout: rows of 64 operands padded by 8 (72 halves, 144 bytes), written as
// 512 chunks of 8 operands, chunk c = it * THREADS + lid at row c / 8, column (c % 8) * 8, the
// same invocation-to-chunk map as their K and V staging. PACKED = 0 stores a chunk as eight
// float16_t stores, each operand unpacked from its 32-bit word and converted (the pattern the
// kernels' put_chunk had before the packed operand pool); PACKED = 1 as one uvec4 store;
// PACKED = 2 as eight float16_t stores again, but operand j of every chunk in one contiguous run
// (a warp's store: 64 consecutive bytes), which separates the cost of the store count from that
// of the bank conflicts of the kernels' layout (the values are the same, so is the host's check). Then a
// barrier, each invocation reads back one word another invocation stored, and a barrier.
// The chunks are built from the invocation's running value, and every round's word read back
// feeds the next value (a multiply-add), which is written out: the compiler can neither drop a
// store nor shorten the loop; the loop is not unrolled. Every half is a normal number in [1, 2)
// (exponent 15, any mantissa), so the float16 round trip keeps its bits and the host recomputes
// workgroups' values from the bits alone. The time of a dispatch over the iterations is one round:
// the tile's stores plus micro_barrier.comp's round (two barriers with one shared load and store),
// which is the baseline to subtract.

#extension GL_EXT_control_flow_attributes : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

layout(local_size_x_id = 0) in;
#include "interface/micro.h"
PSK_DECLARE_SPECS(PSK_MICRO_SHARED_STORE_SPEC)
PSK_DECLARE_BINDINGS(PSK_MICRO_BARRIER_BINDINGS)

layout(std430, binding = BINDING_RESULT) writeonly buffer Result { uint result[]; };

const uint ROWS = 64u;                 // operand rows of the tile
const uint ROW = 72u;                  // halves per row: 64 operands + 8 of padding
const uint CHUNKS = ROWS * 8u;         // 16-byte chunks of 8 operands per tile
const uint PER_INVOCATION = CHUNKS / THREADS;

// One of the two is used (PACKED); the other is dead code the compiler drops.
shared float16_t pool16[ROWS * ROW];
shared uvec4 pool128[ROWS * ROW / 8u];

// Word k of chunk c built from value v: two float16 bit patterns with exponent 15 (psk micro's
// host recomputes it: cmd_micro.cpp, sharedStoreWord).
uint chunk_word(uint h, uint k) {
    return 0x3C003C00u | ((h + k * 0x01F30217u) & 0x03FF03FFu);
}
uint chunk_hash(uint v, uint c) {
    const uint h = v ^ (c * 0x9E3779B9u);
    return h ^ (h >> 15);
}

void main() {
    const uint lid = gl_LocalInvocationID.x;
    // The word read back: word (i % 4) of the chunk after this invocation's first, which another
    // invocation stored.
    const uint peer = lid + 1u == CHUNKS ? 0u : lid + 1u;
    const uint peer16 = (peer / 8u) * ROW + (peer % 8u) * 8u;
    uint v = (lid + 1u) * 2654435761u + params.seed + gl_WorkGroupID.x * 40503u;
    [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
        [[unroll]] for (uint it = 0u; it < PER_INVOCATION; ++it) {
            const uint c = it * THREADS + lid;
            const uint h = chunk_hash(v, c);
            const uvec4 chunk = uvec4(chunk_word(h, 0u), chunk_word(h, 1u), chunk_word(h, 2u), chunk_word(h, 3u));
            const uint at = (c / 8u) * ROW + (c % 8u) * 8u;
            if (PACKED == 1u) {
                pool128[at / 8u] = chunk;
            } else if (PACKED == 2u) {
                // Operand j of every chunk in one contiguous run: a warp's store covers 64
                // consecutive bytes (one pass of the banks), the count of stores unchanged.
                [[unroll]] for (uint k = 0u; k < 4u; ++k) {
                    pool16[(2u * k) * CHUNKS + c] = float16_t(unpackHalf2x16(chunk[k]).x);
                    pool16[(2u * k + 1u) * CHUNKS + c] = float16_t(unpackHalf2x16(chunk[k]).y);
                }
            } else {
                [[unroll]] for (uint k = 0u; k < 4u; ++k) {
                    pool16[at + 2u * k] = float16_t(unpackHalf2x16(chunk[k]).x);
                    pool16[at + 2u * k + 1u] = float16_t(unpackHalf2x16(chunk[k]).y);
                }
            }
        }
        barrier();  // every store is visible before the loads
        const uint w = i & 3u;
        uint word;
        if (PACKED == 1u) {
            word = pool128[peer16 / 8u][w];
        } else if (PACKED == 2u) {
            word = packHalf2x16(vec2(float(pool16[(2u * w) * CHUNKS + peer]), float(pool16[(2u * w + 1u) * CHUNKS + peer])));
        } else {
            word = packHalf2x16(vec2(float(pool16[peer16 + 2u * w]), float(pool16[peer16 + 2u * w + 1u])));
        }
        barrier();  // every invocation has read before the next round's stores
        v = v * 1664525u + word + i;
    }
    result[gl_WorkGroupID.x * THREADS + lid] = v;
}
