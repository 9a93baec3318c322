// One spelling of cooperative matrices for GL_NV_cooperative_matrix and GL_KHR_cooperative_matrix.
// A kernel includes this with exactly one of COOPMAT_NV, COOPMAT_KHR and one operand type,
// OPERAND_F16 (float16_t) or OPERAND_BF16 (bfloat16_t: KHR only, GL_EXT_bfloat16), and declares
// the shape as specialization constants CM_M, CM_N, CM_K before including it. Products are
// accumulated in float32 whatever the operand type.
//
//   CM_OPERAND             scalar type of the A and B operands (shared memory staging)
//   CM_A, CM_B, CM_ACC     types of an M x K operand, a K x N operand, an M x N float32 accumulator
//   CM_ACC_ZERO            a zero accumulator
//   CM_LOAD_ROW(m, arr, element, stride)  load m from arr[element...], rows `stride` elements apart
//   CM_LOAD_COL(m, arr, element, stride)  same, column-major (columns `stride` elements apart)
//   CM_STORE_ROW(m, arr, element, stride) store m row-major
//   CM_MULADD(a, b, c)     a * b + c
//
// Loads and stores need element offsets and strides whose byte values are multiples of 16 (the
// Vulkan rule for both extensions); the kernels keep every shared-memory row 16-byte aligned.
#ifndef PSK_COOPMAT_GLSL
#define PSK_COOPMAT_GLSL

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
#define CM_STORE_ROW(m, arr, element, stride) coopMatStoreNV(m, arr, element, stride, false)
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
#define CM_MULADD(a, b, c) coopMatMulAdd(a, b, c)
#else
#error "define COOPMAT_NV or COOPMAT_KHR"
#endif

#define CM_ACC_ZERO CM_ACC(0.0)

#endif
