// What every kernel that feeds the 16-bit matrix units does to a float32 value first, in one
// place so that a value staged by one kernel and one packed by another (z_operands.comp, for the
// cooperative output) are the same operands: the power-of-two range scale (operand_scale) and the
// split into two operands, hi + lo (CM_SPLIT_HIGH). Needs OPERAND_F16 or OPERAND_BF16 defined;
// plain GLSL (no 16-bit types), so kernels without cooperative matrices may include it.
#ifndef PSK_OPERANDS_GLSL
#define PSK_OPERANDS_GLSL

// 2^e such that x * 2^e <= 2^14 < 2 x * 2^e (1 for x = 0), e in -60..60 so that the product of
// two inverse scales stays a normal float32.
float operand_scale(float x) {
    if (!(x > 0.0)) return 1.0;
    int e;
    frexp(x, e);  // x < 2^e
    return exp2(float(clamp(14 - e, -60, 60)));
}

// A float split into two operands, v = hi + lo: hi = CM_SPLIT_HIGH(v), a float the operand type
// holds exactly, stored as CM_TO_OPERAND(hi) (exact), and lo = CM_TO_OPERAND(v - hi): about 22
// significant bits for float16, 16 for bfloat16, instead of 11 and 8. hi is rounded by integer
// arithmetic on v's bits, never as v - float(CM_TO_OPERAND(v)): a driver may evaluate
// float(CM_OPERAND(v)) as v (the float32 -> 16-bit -> float32 round trip folded away; reported for
// Vulkan drivers by vkd3d-proton, pull request 1648, and seen on NVIDIA's, where every lo of the
// cooperative feature map came out zero), which makes every lo zero and the split a single operand.
// The emulated backend folds that way under PSK_EMULATED_FOLDED_CONVERSIONS. float16: nearest (ties
// away from zero) at 10 fraction bits for |v| >= 2^-14; below float16's normal range hi is 0 and
// lo holds all of v (rounded to float16's subnormals, an absolute error below 2^-25); infinity and
// NaN stay in hi. bfloat16: nearest (ties away) at 7 fraction bits, float32's whole range.
float cm_split_high(float v) {
    const uint u = floatBitsToUint(v);
    if ((u & 0x7F800000u) == 0x7F800000u) return v;
#if defined(OPERAND_F16)
    if ((u & 0x7F800000u) < (113u << 23)) return 0.0;
    return uintBitsToFloat((u + 0x1000u) & 0xFFFFE000u);
#else
    return uintBitsToFloat((u + 0x8000u) & 0xFFFF0000u);
#endif
}
#define CM_SPLIT_HIGH(v) cm_split_high(v)

#endif
