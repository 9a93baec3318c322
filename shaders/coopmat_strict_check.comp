#version 450
// The emulated cooperative-matrix backend's strictness under test (coopmat.glsl, "strict"; tests
// only: tests/coopmat_strict_test.cpp). One subgroup stages A (M x K) and B (K x N) of small
// integers in shared memory, loads them, multiplies and stores C = A B (exact in float16 and
// float32) to `c_out` row-major; push constant `mode` commits one violation of the extensions'
// rules (interface/coopmat_strict_check.h). A legal run must give the exact product, every
// violation must give NaN somewhere: otherwise the emulation would let a kernel that a GPU driver
// may miscompile pass the conformance suite.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require

layout(local_size_x_id = 0) in;
#include "interface/coopmat_strict_check.h"
PSK_DECLARE_SPECS(PSK_COOPMAT_STRICT_CHECK_SPEC)

#define CM_SUBGROUPS 1u
#include "coopmat.glsl"

layout(std430, binding = 0) writeonly buffer COut { float c_out[]; };

const uint LD = 24u;                       // rows padded to 24 elements (48 bytes)
const uint OP_B = CM_M * LD + 8u;          // B after A and 8 spare elements (misaligned / non-uniform loads stay inside)
const uint OPS = OP_B + CM_K * LD;
shared CM_OPERAND op[CM_SHARED_COUNT(OPS, CM_OPERAND_BYTES)];
shared float c_tile[CM_SHARED_COUNT(CM_M * CM_N, 4u)];

float a_value(uint r, uint k) {
    if (params.mode == PSK_STRICT_ROUNDING) return k == 0u ? 4096.0 : k == 1u ? 1.0 : 0.0;
    return float(int((r * 7u + k * 3u) % 5u) - 2);
}
float b_value(uint k, uint c) {
    if (params.mode == PSK_STRICT_ROUNDING) return (k == 0u ? 4096.0 : k == 1u ? 1.5 : 0.0) * ((c & 1u) != 0u ? -1.0 : 1.0);
    return float(int((k * 5u + c) % 7u) - 3);
}

void main() {
    CM_POISON_SHARED(op, OPS);
    CM_POISON_SHARED(c_tile, CM_M * CM_N);
    const uint lid = gl_LocalInvocationID.x, lane = gl_SubgroupInvocationID;
    const uint mode = params.mode;
    for (uint i = lid; i < CM_M * LD; i += THREADS) {
        const uint r = i / LD, k = i % LD;
        op[i] = CM_TO_OPERAND(k < CM_K ? a_value(r, k) : 0.0);
    }
    for (uint i = lid; i < CM_K * LD; i += THREADS) {
        const uint k = i / LD, c = i % LD;
        if (mode == PSK_STRICT_UNWRITTEN && k == CM_K - 1u) continue;
        op[OP_B + i] = CM_TO_OPERAND(c < CM_N ? b_value(k, c) : 0.0);
    }
    barrier();
    CM_A a;
    CM_B b;
    CM_ACC c = CM_ACC_ZERO;
    a = cm_fill(0.0);  // lanes that skip the divergent load (this kernel is built for the emulated backend only)
    const uint a_off = mode == PSK_STRICT_MISALIGNED ? 4u : (mode == PSK_STRICT_NONUNIFORM && lane == 0u) ? 8u : 0u;
    const uint a_stride = mode == PSK_STRICT_STRIDE ? 20u : LD;
    if (mode != PSK_STRICT_DIVERGENT || lane < gl_SubgroupSize / 2u) CM_LOAD_ROW_A(a, op, a_off, a_stride);
    CM_LOAD_ROW_B(b, op, OP_B, LD);
    c = CM_MULADD(a, b, c);
    CM_STORE_ROW(c, c_tile, 0u, CM_N);
    barrier();
    for (uint i = lid; i < CM_M * CM_N; i += THREADS) c_out[i] = c_tile[i];
}
