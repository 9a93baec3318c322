#version 450
// psk micro (tools only): cooperative-matrix products per second, with their operands in registers
// or loaded from shared memory the ways the cooperative kernels load them, so that the model's
// tensor rate (docs/predictions.py, Machine.tc_vk) and its charge for a fragment load (512 bytes
// through the shared-memory data path) are measured on the driver instead of assumed.
//
// Each subgroup keeps PSK_MICRO_COOPMAT_WN = 4 float32 accumulators and, per step of the loop,
// adds one CM_M x CM_K by CM_K x CM_N product to each. The operands are TILES = 4 A tiles and 4 B
// tiles in shared memory, side by side in rows padded by 8 operands as the kernels lay out theirs
// (A: CM_M rows of 4 CM_K operands + 8; B: CM_K rows of 4 CM_N + 8): FORM says where a product's
// operands come from (interface/micro.h):
//   REGISTERS  A tile 0 and B tiles 0..3 loaded once before the loop: products alone;
//   RELOAD     A tile (i + w) % 4 and B tile (i + 2 w) % 4 loaded right before product w of step i
//              (two fragment loads per product: sketch_features_coopmat.comp's gemm);
//   REUSE_A    A tile i % 4 once per step, B tile (i + 2 w) % 4 per product (1 + 1/4 loads per
//              product: the output's phi(q)^T Z and local part, the block states);
//   PACKED     as RELOAD from the same values in a uvec4 array (the packed operand pools).
// The tiles change with the step, so no load can leave the loop, and RELOAD's A differs between
// the products of a step, so no load is shared between them. The operands are -1, 0 or 1 (a hash
// of the seed, the tile and the element, which the host recomputes), so every float32 sum is an
// exact integer whatever order the hardware adds in (|sum| <= CM_K x steps < 2^24), and the host
// checks the accumulators, stored row-major to `result`, exactly. The loop is not unrolled.
//
// One source for GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix and the emulated backend
// (coopmat.glsl; float16 operands): the emulated variant only checks the harness on devices
// without cooperative matrices (its time says nothing about a GPU).

#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0) in;
#include "interface/micro.h"
PSK_DECLARE_SPECS(PSK_MICRO_COOPMAT_SPEC)
PSK_DECLARE_BINDINGS(PSK_MICRO_BARRIER_BINDINGS)

#define CM_SUBGROUPS SUBGROUPS
#include "coopmat.glsl"

layout(std430, binding = BINDING_RESULT) writeonly buffer Result { float result[]; };

const uint WN = PSK_MICRO_COOPMAT_WN;
const uint TILES = PSK_MICRO_COOPMAT_TILES;
const uint PAD = 8u;
const uint LDA = TILES * CM_K + PAD;  // A: CM_M rows, tile t at column t CM_K
const uint LDB = TILES * CM_N + PAD;  // B: CM_K rows, tile t at column t CM_N
const uint A_OPS = CM_M * LDA;
const uint B_OPS = CM_K * LDB;
const uint OPS = A_OPS + B_OPS;  // a multiple of 8: every row is

// One of the two is used (FORM); the compiler drops the other.
shared CM_OPERAND pool[CM_SHARED_COUNT(OPS, CM_OPERAND_BYTES)];
shared CM_PACKED pool_v[OPS / 8u];

// Operand j of the pool (A's elements, then B's; padding 0): -1, 0 or 1 from a hash of the seed,
// the matrix, the tile and the element (psk micro's host recomputes it: cmd_micro.cpp).
float operand_value(uint j) {
    const bool is_b = j >= A_OPS;
    const uint e = is_b ? j - A_OPS : j;
    const uint ld = is_b ? LDB : LDA, width = is_b ? CM_N : CM_K;
    const uint row = e / ld, col = e % ld;
    if (col >= TILES * width) return 0.0;
    uint h = ((is_b ? 1u : 0u) * 977u + (col / width) * 131u + row * 17u + col % width) * 2654435761u + params.seed;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    return float(int(h % 3u) - 1);
}

void main() {
    const uint lid = gl_LocalInvocationID.x, sg = gl_SubgroupID;
    if (FORM == PSK_MICRO_COOPMAT_PACKED) {
        for (uint c = lid; c < OPS / 8u; c += THREADS) {
            uvec4 chunk;
            [[unroll]] for (uint k = 0u; k < 4u; ++k)
                chunk[k] = packHalf2x16(vec2(operand_value(8u * c + 2u * k), operand_value(8u * c + 2u * k + 1u)));
            pool_v[c] = chunk;
        }
    } else {
        for (uint j = lid; j < OPS; j += THREADS) pool[j] = CM_TO_OPERAND(operand_value(j));
    }
    barrier();

    CM_ACC acc[WN];
    [[unroll]] for (uint w = 0u; w < WN; ++w) acc[w] = CM_ACC_ZERO;
    if (FORM == PSK_MICRO_COOPMAT_REGISTERS) {
        CM_A a;
        CM_LOAD_ROW_A(a, pool, 0u, LDA);
        CM_B b[WN];
        [[unroll]] for (uint w = 0u; w < WN; ++w) CM_LOAD_ROW_B(b[w], pool, A_OPS + w * CM_N, LDB);
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i)
            [[unroll]] for (uint w = 0u; w < WN; ++w) acc[w] = CM_MULADD(a, b[w], acc[w]);
    } else if (FORM == PSK_MICRO_COOPMAT_REUSE_A) {
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
            CM_A a;
            CM_LOAD_ROW_A(a, pool, (i % TILES) * CM_K, LDA);
            [[unroll]] for (uint w = 0u; w < WN; ++w) {
                CM_B b;
                CM_LOAD_ROW_B(b, pool, A_OPS + ((i + 2u * w) % TILES) * CM_N, LDB);
                acc[w] = CM_MULADD(a, b, acc[w]);
            }
        }
    } else {
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
            [[unroll]] for (uint w = 0u; w < WN; ++w) {
                const uint ta = (i + w) % TILES, tb = (i + 2u * w) % TILES;
                CM_A a;
                CM_B b;
                if (FORM == PSK_MICRO_COOPMAT_PACKED) {
                    CM_LOAD_ROW_A_V(a, pool_v, ta * CM_K / 8u, LDA / 8u);
                    CM_LOAD_ROW_B_V(b, pool_v, (A_OPS + tb * CM_N) / 8u, LDB / 8u);
                } else {
                    CM_LOAD_ROW_A(a, pool, ta * CM_K, LDA);
                    CM_LOAD_ROW_B(b, pool, A_OPS + tb * CM_N, LDB);
                }
                acc[w] = CM_MULADD(a, b, acc[w]);
            }
        }
    }
    [[unroll]] for (uint w = 0u; w < WN; ++w)
        CM_STORE_ROW(acc[w], result, ((gl_WorkGroupID.x * SUBGROUPS + sg) * WN + w) * CM_M * CM_N, CM_N);
}
