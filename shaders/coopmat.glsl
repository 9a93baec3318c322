// One spelling of cooperative matrices for GL_KHR_cooperative_matrix, GL_NV_cooperative_matrix
// and an emulation of both. A kernel includes this with exactly one backend, COOPMAT_KHR,
// COOPMAT_NV or COOPMAT_EMULATED, and one operand type, OPERAND_F16 (float16) or OPERAND_BF16
// (bfloat16: KHR with GL_EXT_bfloat16, or emulated), and declares the shape as specialization
// constants CM_M, CM_N, CM_K before including it. Products are accumulated in float32 whatever
// the operand type.
//
//   CM_OPERAND             scalar type of the A and B operands in shared memory (CM_OPERAND_BYTES each)
//   CM_SHARED_COUNT(n, bytes)  the count a shared array of n elements of `bytes` is declared with (below)
//   CM_SPLIT_HIGH(v)       the high part of v split into two operands, hi + lo (at the end)
//   CM_TO_OPERAND(x)       a float rounded to the operand type (store it in a CM_OPERAND array)
//   CM_A, CM_B, CM_ACC     types of an M x K operand, a K x N operand, an M x N float32 accumulator
//   CM_ACC_ZERO            a zero accumulator
//   CM_LOAD_ROW(m, arr, element, stride)  load m from arr[element...], rows `stride` elements apart
//   CM_LOAD_COL(m, arr, element, stride)  same, column-major (columns `stride` elements apart)
//   CM_LOAD_ROW_ACC(m, arr, element, stride)  load a float32 accumulator row-major (to add to it)
//   CM_LOAD_ROW_A_V, CM_LOAD_ROW_B_V, CM_LOAD_COL_B_V(m, arr, element, stride)
//                          A or B operands from a uvec4 array (CM_PACKED: eight 16-bit operands
//                          per element, as stored; element and stride in uvec4 units), which both
//                          extensions allow for memory of another type than the matrix's: a kernel
//                          then stages 16 bytes per store instead of one operand
//   CM_POISON_SHARED_V(arr, count)  CM_POISON_SHARED for a CM_PACKED array
//   CM_STORE_ROW(m, arr, element, stride) store m row-major
//   CM_STORE_ROW_A(m, arr, element, stride) store an A operand row-major into a CM_OPERAND array (diagnostics)
//   CM_MULADD(a, b, c)     a * b + c
//   CM_ADD_SCALED(total, m, s)  total += m * s for float32 accumulators and a float s (component-wise;
//                          with s a power of two, this undoes operand scaling exactly)
//
// Loads and stores need element offsets and strides whose byte values are multiples of 16 (the
// Vulkan rule for both extensions); the kernels keep every shared-memory row 16-byte aligned.
//
// COOPMAT_EMULATED runs on any Vulkan 1.1 device with basic subgroup operations (lavapipe in CI):
// not for speed, but so that every cooperative kernel's tiling, staging, edge tiles, scaling and
// masking run in the conformance suite where no device has cooperative matrices. A matrix is
// spread over the subgroup as the hardware spreads it: element e of its row-major M x N (or
// M x K, K x N) elements lives in lane e % gl_SubgroupSize, slot e / gl_SubgroupSize of that
// lane's private array. Operands are rounded to float16 / bfloat16 when staged (CM_TO_OPERAND),
// as the hardware path stores them, and kept as float in shared memory (or packed, eight to a
// uvec4, in a CM_PACKED pool, exactly as on the hardware), so the numbers are those of the
// hardware path up to the order of the float32 additions. The multiply-add exchanges the
// operands through a per-subgroup region of shared memory: the kernel defines CM_SUBGROUPS
// (subgroups per workgroup) before the include. Shapes up to M * N, M * K, K * N <= 64 x the
// subgroup size (the host plans 16 x 16 x 16, or PSK_COOPMAT_EMULATION_SHAPE's, with subgroups of 4
// or more).
//
// The emulation is also strict about what a driver may do differently from it, so that a kernel
// that depends on one driver's luck fails on lavapipe:
//   - shared memory starts as NaN (CM_POISON_SHARED, at the top of each kernel: on a GPU it holds
//     whatever the previous workgroup left, which may be NaN or infinity; a kernel that reads an
//     element it never wrote, even to multiply it by zero, then fails the conformance suite);
//   - every load, store and product checks the rules of both extensions: the whole subgroup
//     present (no divergent lanes), the same element offset and stride in every lane, and the
//     byte offset and stride multiples of 16 at the hardware's operand size (2 bytes for A and B,
//     4 for accumulators); a violation makes the matrix NaN (a load or product) or stores NaN, so
//     the output is non-finite and the test that ran it fails.
// CM_POISON_SHARED is empty on the hardware backends.
//
// How the emulation adds a product's terms is a specialization constant the host sets
// (interface/emulated_products.h, PSK_COOPMAT_EMULATED_PRODUCTS): by default each term is a
// float32 multiply-add rounded to nearest; "tensor-core" models the block fused multiply-add
// measured on NVIDIA's tensor cores (truncating alignment to the largest term, truncated sum), so
// that an error budget can be checked against the matrix units' accumulation on lavapipe.
#ifndef PSK_COOPMAT_GLSL
#define PSK_COOPMAT_GLSL

// Shared arrays in a kernel with cooperative loads and stores are declared with
// CM_SHARED_COUNT(count, bytes per element): the count rounded up to a multiple of 16 bytes, so
// that wherever and in whatever order a driver places the workgroup's arrays (each at its own
// element alignment, one after another), every array starts 16-byte aligned, as the cooperative
// loads and stores need their addresses to be. A lone 4-byte variable placed first moved every
// array after it by 4 bytes on NVIDIA's driver, and its cooperative loads read 16-byte aligned
// addresses below the intended ones (docs/RELIABILITY.md, "The cooperative feature map on
// NVIDIA"). tools/shader_lint.py checks every declaration.
#define CM_SHARED_COUNT(count, bytes) ((((count) * (bytes) + 15u) / 16u) * 16u / (bytes))

#if defined(COOPMAT_EMULATED)

#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_ballot : require
#if !defined(CM_SUBGROUPS)
#error "the emulated backend needs CM_SUBGROUPS (subgroups per workgroup) defined before the include"
#endif
#define CM_OPERAND float
#define CM_OPERAND_BYTES 4u  // what a CM_OPERAND element takes in shared memory
#define CM_PACKED uvec4
#include "interface/emulated_products.h"
layout(constant_id = PSK_EMULATED_PRODUCTS_ID) const uint CM_PRODUCTS = PSK_EMULATED_PRODUCTS_IEEE;
// PSK_EMULATED_FOLDED_CONVERSIONS: operands are rounded where the matrix units read them (the
// fragment loads), not where they are staged, so that float(CM_TO_OPERAND(v)) is v in the kernel's
// own arithmetic, as a driver may compile it (see CM_SPLIT_HIGH below).
const bool CM_FOLDED = (CM_PRODUCTS & PSK_EMULATED_FOLDED_CONVERSIONS) != 0u;
#if defined(OPERAND_F16)
// Round to float16 (nearest even) and back: packHalf2x16 is core GLSL, no float16 arithmetic needed.
float cm_round_operand(float value) { return unpackHalf2x16(packHalf2x16(vec2(value, 0.0))).x; }
#elif defined(OPERAND_BF16)
float cm_round_operand(float x) {
    uint u = floatBitsToUint(x);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return x;  // NaN stays NaN
    u += 0x7FFFu + ((u >> 16) & 1u);
    return uintBitsToFloat(u & 0xFFFF0000u);
}
#else
#error "define OPERAND_F16 or OPERAND_BF16"
#endif
#define CM_TO_OPERAND(x) (CM_FOLDED ? (x) : cm_round_operand(x))

const uint CM_SLOTS = 64u;  // per lane: M * N / subgroup size at most (checked by the host)
struct CmFragment {
    float e[CM_SLOTS];
};
#define CM_A CmFragment
#define CM_B CmFragment
#define CM_ACC CmFragment

CmFragment cm_fill(float v) {
    CmFragment m;
    [[unroll]] for (uint s = 0u; s < CM_SLOTS; ++s) m.e[s] = v;
    return m;
}
#define CM_ACC_ZERO cm_fill(0.0)

#define CM_NAN uintBitsToFloat(0x7FC00000u)

// Shared memory as a GPU may hand it over: not zero. Every invocation, at the top of main (uniform
// control flow), then a barrier.
#define CM_POISON_SHARED(arr, count)                                                                 \
    for (uint cm_i = gl_LocalInvocationIndex; cm_i < (count); cm_i += gl_WorkGroupSize.x * gl_WorkGroupSize.y) \
        arr[cm_i] = CM_NAN;                                                                          \
    barrier()

// The rules of a cooperative load, store or product at this call site (see the header comment):
// the whole subgroup here, offset and stride uniform and 16-byte multiples at `bytes` per element.
// NaN operands in every slot of a packed element (float16 0x7E00, bfloat16 0x7FC0).
#if defined(OPERAND_F16)
#define CM_NAN_PACKED uvec4(0x7E007E00u)
#else
#define CM_NAN_PACKED uvec4(0x7FC07FC0u)
#endif
#define CM_POISON_SHARED_V(arr, count)                                                               \
    for (uint cm_i = gl_LocalInvocationIndex; cm_i < (count); cm_i += gl_WorkGroupSize.x * gl_WorkGroupSize.y) \
        arr[cm_i] = CM_NAN_PACKED;                                                                   \
    barrier()

bool cm_legal(uint element, uint stride, uint bytes) {
    const bool converged = subgroupBallotBitCount(subgroupBallot(true)) == gl_SubgroupSize;
    return converged && subgroupAllEqual(element) && subgroupAllEqual(stride) && (element * bytes) % 16u == 0u &&
           (stride * bytes) % 16u == 0u;
}

// What a fragment load hands the matrix units: an operand (2 bytes) rounded to the operand type
// when staging left it unrounded (CM_FOLDED), an accumulator (4 bytes) as it is.
float cm_fragment_value(float v, uint bytes) { return CM_FOLDED && bytes == 2u ? cm_round_operand(v) : v; }

// Element e of a rows x cols matrix (row-major index) at arr[element + r * stride + c] (row-major)
// or arr[element + c * stride + r] (column-major).
#define CM_EMU_LOAD(m, arr, element, stride, rows, cols, column_major, bytes)                       \
    {                                                                                                 \
        const bool cm_ok = cm_legal(element, stride, bytes);                                         \
        for (uint cm_s = 0u; cm_s * gl_SubgroupSize < (rows) * (cols); ++cm_s) {                      \
            const uint cm_e = cm_s * gl_SubgroupSize + gl_SubgroupInvocationID;                        \
            const uint cm_r = cm_e / (cols), cm_c = cm_e % (cols);                                    \
            if (cm_e < (rows) * (cols))                                                               \
                m.e[cm_s] = cm_ok ? cm_fragment_value(float(arr[(element) + ((column_major) ? cm_c * (stride) + cm_r : cm_r * (stride) + cm_c)]), bytes) \
                                  : CM_NAN;                                                           \
        }                                                                                             \
    }
// Operand i (0-7) of a packed element: float16 halves, or bfloat16's high 16 bits of a float.
float cm_unpack_operand(uvec4 v, uint i) {
    const uint u = v[i / 2u];
#if defined(OPERAND_F16)
    return (i & 1u) == 0u ? unpackHalf2x16(u).x : unpackHalf2x16(u).y;
#else
    return uintBitsToFloat((i & 1u) == 0u ? u << 16 : u & 0xFFFF0000u);
#endif
}
// A load from a CM_PACKED array: `element` and `stride` count uvec4 (16-byte) elements, as the
// hardware extensions count the array's own elements; operand (r, c) of a row-major matrix is
// operand 8 (element + r stride) + c of the array.
#define CM_EMU_LOAD_PACKED(m, arr, element, stride, rows, cols, column_major)                       \
    {                                                                                                 \
        const bool cm_ok = cm_legal(8u * (element), 8u * (stride), 2u);                               \
        for (uint cm_s = 0u; cm_s * gl_SubgroupSize < (rows) * (cols); ++cm_s) {                      \
            const uint cm_e = cm_s * gl_SubgroupSize + gl_SubgroupInvocationID;                        \
            const uint cm_r = cm_e / (cols), cm_c = cm_e % (cols);                                    \
            const uint cm_h = (column_major) ? cm_c * 8u * (stride) + cm_r : cm_r * 8u * (stride) + cm_c; \
            if (cm_e < (rows) * (cols))                                                               \
                m.e[cm_s] = cm_ok ? cm_unpack_operand(arr[(element) + cm_h / 8u], cm_h % 8u) : CM_NAN;   \
        }                                                                                             \
    }
#define CM_LOAD_ROW_A_V(m, arr, element, stride) CM_EMU_LOAD_PACKED(m, arr, element, stride, CM_M, CM_K, false)
#define CM_LOAD_ROW_B_V(m, arr, element, stride) CM_EMU_LOAD_PACKED(m, arr, element, stride, CM_K, CM_N, false)
#define CM_LOAD_COL_B_V(m, arr, element, stride) CM_EMU_LOAD_PACKED(m, arr, element, stride, CM_K, CM_N, true)
#define CM_LOAD_ROW_A(m, arr, element, stride) CM_EMU_LOAD(m, arr, element, stride, CM_M, CM_K, false, 2u)
#define CM_LOAD_COL_A(m, arr, element, stride) CM_EMU_LOAD(m, arr, element, stride, CM_M, CM_K, true, 2u)
#define CM_LOAD_ROW_B(m, arr, element, stride) CM_EMU_LOAD(m, arr, element, stride, CM_K, CM_N, false, 2u)
#define CM_LOAD_COL_B(m, arr, element, stride) CM_EMU_LOAD(m, arr, element, stride, CM_K, CM_N, true, 2u)
#define CM_LOAD_ROW_ACC(m, arr, element, stride) CM_EMU_LOAD(m, arr, element, stride, CM_M, CM_N, false, 4u)
// Element e of a rows x cols matrix stored row-major at arr[element + r * stride + c].
#define CM_EMU_STORE(m, arr, element, stride, rows, cols, bytes)                                    \
    {                                                                                                 \
        const bool cm_ok = cm_legal(element, stride, bytes);                                         \
        for (uint cm_s = 0u; cm_s * gl_SubgroupSize < (rows) * (cols); ++cm_s) {                      \
            const uint cm_e = cm_s * gl_SubgroupSize + gl_SubgroupInvocationID;                        \
            if (cm_e < (rows) * (cols)) arr[(element) + (cm_e / (cols)) * (stride) + cm_e % (cols)] = cm_ok ? m.e[cm_s] : CM_NAN; \
        }                                                                                             \
    }
#define CM_STORE_ROW(m, arr, element, stride) CM_EMU_STORE(m, arr, element, stride, CM_M, CM_N, 4u)
#define CM_STORE_ROW_A(m, arr, element, stride) CM_EMU_STORE(m, arr, element, stride, CM_M, CM_K, 2u)

// x 2^n for n in -252..254, exact where the result is a normal float (two factors: 2^n alone
// may not be one).
float cm_pow2(int n) { return uintBitsToFloat(uint(clamp(n, -126, 127) + 127) << 23); }
float cm_scale2(float x, int n) { return x * cm_pow2(n / 2) * cm_pow2(n - n / 2); }

// c + sum of prod[k] as a tensor core's block fused multiply-add (PSK_EMULATED_PRODUCTS_TENSOR_CORE):
// each term (the products are exact in float32: two 16-bit operands) cut toward zero to a multiple
// of 2^(e_max - 24), where 2^e_max bounds the largest term, the multiples summed exactly in two
// integer halves (12 low bits and the rest, which stay inside 32 bits for 17 terms), the total
// cut to float32's 24 bits toward zero. `exponent_bits` is the largest term's biased exponent
// field (floatBitsToUint & 0x7F800000); a non-finite term, or none but zeros, takes the ordinary
// float32 sum (NaN and infinity stay what they are: the strict checks depend on them).
float cm_tensor_core_sum(float c, float prod[CM_K], bool finite, uint exponent_bits) {
    if (!finite || exponent_bits == 0u) {
        float sum = c;
        [[unroll]] for (uint k = 0u; k < CM_K; ++k) sum += prod[k];
        return sum;
    }
    const int shift = 24 - (max(int(exponent_bits >> 23), 1) - 126);  // the largest term times 2^shift < 2^24
    int m = int(trunc(cm_scale2(c, shift)));
    int high = m >> 12, low = m & 4095;
    [[unroll]] for (uint k = 0u; k < CM_K; ++k) {
        m = int(trunc(cm_scale2(prod[k], shift)));
        high += m >> 12;
        low += m & 4095;
    }
    high += low >> 12;
    low &= 4095;
    // |total| = magnitude_high 4096 + magnitude_low, then cut to 24 significant bits.
    const bool negative = high < 0;
    const int magnitude_high = negative ? (low > 0 ? -high - 1 : -high) : high;
    const int magnitude_low = negative ? (low > 0 ? 4096 - low : 0) : low;
    const int drop = magnitude_high < 4096 ? 0 : findMSB(magnitude_high) - 11;
    const float magnitude = float(magnitude_high) * 4096.0 + float((magnitude_low >> drop) << drop);
    return cm_scale2(negative ? -magnitude : magnitude, -shift);
}

const uint CM_SCRATCH = CM_M * CM_K + CM_K * CM_N;  // per subgroup: A, then B, row-major
shared float cm_scratch[CM_SHARED_COUNT(CM_SUBGROUPS * CM_SCRATCH, 4u)];

// c + a * b: the subgroup writes a and b to its scratch region, then every lane computes its own
// elements of c from whole rows of a and columns of b.
CmFragment cm_muladd(CmFragment a, CmFragment b, CmFragment c) {
    const uint base = gl_SubgroupID * CM_SCRATCH, lanes = gl_SubgroupSize, lane = gl_SubgroupInvocationID;
    const bool converged = subgroupBallotBitCount(subgroupBallot(true)) == gl_SubgroupSize;
    subgroupBarrier();  // the previous product's reads of the scratch are done
    for (uint s = 0u; s * lanes < CM_M * CM_K; ++s)
        if (s * lanes + lane < CM_M * CM_K) cm_scratch[base + s * lanes + lane] = a.e[s];
    for (uint s = 0u; s * lanes < CM_K * CM_N; ++s)
        if (s * lanes + lane < CM_K * CM_N) cm_scratch[base + CM_M * CM_K + s * lanes + lane] = b.e[s];
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    for (uint s = 0u; s * lanes < CM_M * CM_N; ++s) {
        const uint e = s * lanes + lane;
        if (e < CM_M * CM_N) {
            const uint r = e / CM_N, col = e % CM_N;
            float sum = c.e[s];
            if ((CM_PRODUCTS & PSK_EMULATED_PRODUCTS_TENSOR_CORE) != 0u) {
                // Unrolled, no loop of its own: llvmpipe counts every loop iteration against its budget.
                float prod[CM_K];
                uint exponent_bits = sum != 0.0 ? floatBitsToUint(sum) & 0x7F800000u : 0u;
                bool finite = (floatBitsToUint(sum) & 0x7F800000u) != 0x7F800000u;
                [[unroll]] for (uint k = 0u; k < CM_K; ++k) {
                    prod[k] = cm_scratch[base + r * CM_K + k] * cm_scratch[base + CM_M * CM_K + k * CM_N + col];
                    const uint bits = floatBitsToUint(prod[k]) & 0x7F800000u;
                    finite = finite && bits != 0x7F800000u;
                    exponent_bits = max(exponent_bits, bits);
                }
                sum = cm_tensor_core_sum(sum, prod, finite, exponent_bits);
            } else {
                [[unroll]] for (uint k = 0u; k < CM_K; ++k)
                    sum += cm_scratch[base + r * CM_K + k] * cm_scratch[base + CM_M * CM_K + k * CM_N + col];
            }
            c.e[s] = converged ? sum : CM_NAN;
        }
    }
    return c;
}
#define CM_MULADD(a, b, c) cm_muladd(a, b, c)

void cm_add_scaled(inout CmFragment total, CmFragment m, float s) {
    [[unroll]] for (uint slot = 0u; slot < CM_SLOTS; ++slot) total.e[slot] += m.e[slot] * s;
}
#define CM_ADD_SCALED(total, m, s) cm_add_scaled(total, m, s)

#else  // hardware backends

#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require

#if defined(OPERAND_F16)
#define CM_OPERAND float16_t
#elif defined(OPERAND_BF16)
#if !defined(COOPMAT_KHR)
#error "bfloat16 operands need GL_KHR_cooperative_matrix"
#endif
#extension GL_EXT_bfloat16 : require
#define CM_OPERAND bfloat16_t
#else
#error "define OPERAND_F16 or OPERAND_BF16"
#endif
#define CM_TO_OPERAND(x) CM_OPERAND(x)
#define CM_OPERAND_BYTES 2u  // what a CM_OPERAND element takes in shared memory
#define CM_PACKED uvec4

#if defined(COOPMAT_NV)
#extension GL_NV_cooperative_matrix : require
#if !defined(OPERAND_F16)
#error "GL_NV_cooperative_matrix takes float16 operands only"
#endif
#define CM_A fcoopmatNV<16, gl_ScopeSubgroup, CM_M, CM_K>
#define CM_B fcoopmatNV<16, gl_ScopeSubgroup, CM_K, CM_N>
#define CM_ACC fcoopmatNV<32, gl_ScopeSubgroup, CM_M, CM_N>
#define CM_LOAD_ROW(m, arr, element, stride) coopMatLoadNV(m, arr, element, stride, false)
#define CM_LOAD_COL(m, arr, element, stride) coopMatLoadNV(m, arr, element, stride, true)
#define CM_LOAD_ROW_A CM_LOAD_ROW
#define CM_LOAD_COL_A CM_LOAD_COL
#define CM_LOAD_ROW_B CM_LOAD_ROW
#define CM_LOAD_COL_B CM_LOAD_COL
#define CM_LOAD_ROW_ACC CM_LOAD_ROW
#define CM_STORE_ROW(m, arr, element, stride) coopMatStoreNV(m, arr, element, stride, false)
#define CM_STORE_ROW_A CM_STORE_ROW
#define CM_MULADD(a, b, c) coopMatMulAddNV(a, b, c)
#elif defined(COOPMAT_KHR)
#extension GL_KHR_cooperative_matrix : require
#define CM_A coopmat<CM_OPERAND, gl_ScopeSubgroup, CM_M, CM_K, gl_MatrixUseA>
#define CM_B coopmat<CM_OPERAND, gl_ScopeSubgroup, CM_K, CM_N, gl_MatrixUseB>
#define CM_ACC coopmat<float, gl_ScopeSubgroup, CM_M, CM_N, gl_MatrixUseAccumulator>
#define CM_LOAD_ROW(m, arr, element, stride) coopMatLoad(m, arr, element, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_LOAD_COL(m, arr, element, stride) \
    coopMatLoad(m, arr, element, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define CM_STORE_ROW(m, arr, element, stride) \
    coopMatStore(m, arr, element, stride, gl_CooperativeMatrixLayoutRowMajor)
#define CM_STORE_ROW_A CM_STORE_ROW
#define CM_MULADD(a, b, c) coopMatMulAdd(a, b, c)
#define CM_LOAD_ROW_A CM_LOAD_ROW
#define CM_LOAD_COL_A CM_LOAD_COL
#define CM_LOAD_ROW_B CM_LOAD_ROW
#define CM_LOAD_COL_B CM_LOAD_COL
#define CM_LOAD_ROW_ACC CM_LOAD_ROW
#else
#error "define COOPMAT_KHR, COOPMAT_NV or COOPMAT_EMULATED"
#endif

#define CM_ACC_ZERO CM_ACC(0.0)
#define CM_POISON_SHARED(arr, count)
#define CM_POISON_SHARED_V(arr, count)
// Packed pools: the extensions' loads take arrays of uvec4 with element and stride in its units.
#define CM_LOAD_ROW_A_V CM_LOAD_ROW_A
#define CM_LOAD_ROW_B_V CM_LOAD_ROW_B
#define CM_LOAD_COL_B_V CM_LOAD_COL_B
#if defined(COOPMAT_NV)
// Element by element over the invocation's components (matrices of one type share the layout):
// Debian 12's spirv-opt (SPIRV-Tools 2022.4, glslc -O) crashes on OpFAdd of NV cooperative matrices.
#define CM_ADD_SCALED(total, m, s) \
    for (int cm_i = 0; cm_i < (total).length(); ++cm_i) (total)[cm_i] += (m)[cm_i] * (s)
#else
// Component-wise arithmetic on accumulators: matrix times scalar, then matrix plus matrix.
#define CM_ADD_SCALED(total, m, s) total = (total) + (m) * (s)
#endif

#endif  // hardware backends

// CM_SPLIT_HIGH and operand_scale: operands.glsl (the packing kernel z_operands.comp shares them).
#include "operands.glsl"


#endif
