#version 450
// C = A @ B (B [K, N] row-major, or B^T with B stored [N, K] when TRANSPOSE_B), float32.
// Each invocation computes a 4 x 4 block of C in registers, reading A and B straight from memory:
// no shared memory and no barriers (on CPU drivers such as lavapipe a workgroup barrier switches
// every invocation's coroutine, which made a shared-memory tiled kernel ~10x slower).
// Epilogues: GELU (tanh approximation) on the product, or C += product (the residual add).
// Output column c is written at (c / segLen) * segStride + c % segLen, so the qkv projection can
// leave room between q, k and v (each segment then starts at an aligned byte offset).
layout(local_size_x = 16, local_size_y = 4) in;

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) buffer C { float c[]; };

const uint TRANSPOSE_B = 1u;
const uint GELU = 2u;
const uint ACCUMULATE = 4u;

layout(push_constant) uniform Push {
    uint M, N, K;
    uint aOff, lda;
    uint bOff, ldb;
    uint cOff, ldc;
    uint flags;
    uint segLen, segStride;
} p;

float gelu(float v) {
    // x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), tanh from exp(-2|u|) (no inf/inf for large u).
    const float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
    const float e = exp(-2.0 * abs(u));
    const float t = sign(u) * (1.0 - e) / (1.0 + e);
    return 0.5 * v * (1.0 + t);
}

void main() {
    const uint col0 = (gl_WorkGroupID.x * 16u + gl_LocalInvocationID.x) * 4u;
    const uint row0 = (gl_WorkGroupID.y * 4u + gl_LocalInvocationID.y) * 4u;
    if (col0 >= p.N || row0 >= p.M) return;
    // Rows and columns past the edge read the last valid one (their results are not written).
    uint ra[4], cb[4];
    for (uint i = 0u; i < 4u; ++i) {
        ra[i] = p.aOff + min(row0 + i, p.M - 1u) * p.lda;
        cb[i] = min(col0 + i, p.N - 1u);
    }
    const bool transB = (p.flags & TRANSPOSE_B) != 0u;
    vec4 acc[4] = vec4[4](vec4(0.0), vec4(0.0), vec4(0.0), vec4(0.0));
    for (uint k = 0u; k < p.K; ++k) {
        vec4 bv;
        if (transB) {
            bv = vec4(b[p.bOff + cb[0] * p.ldb + k], b[p.bOff + cb[1] * p.ldb + k], b[p.bOff + cb[2] * p.ldb + k],
                      b[p.bOff + cb[3] * p.ldb + k]);
        } else {
            const uint at = p.bOff + k * p.ldb;
            bv = vec4(b[at + cb[0]], b[at + cb[1]], b[at + cb[2]], b[at + cb[3]]);
        }
        for (uint i = 0u; i < 4u; ++i) acc[i] += a[ra[i] + k] * bv;
    }
    for (uint i = 0u; i < 4u; ++i) {
        if (row0 + i >= p.M) break;
        for (uint j = 0u; j < 4u; ++j) {
            const uint col = col0 + j;
            if (col >= p.N) break;
            const uint at = p.cOff + (row0 + i) * p.ldc + (col / p.segLen) * p.segStride + col % p.segLen;
            float v = acc[i][j];
            if ((p.flags & GELU) != 0u) v = gelu(v);
            if ((p.flags & ACCUMULATE) != 0u) v += c[at];
            c[at] = v;
        }
    }
}
