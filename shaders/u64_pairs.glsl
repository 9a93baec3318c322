// Eight floats per load or store as one u64vec4 (the lane-team kernels, lib/team_kernels.hpp): on
// a CPU driver a memory access is a loop over the SIMD lanes whose cost hardly depends on its
// width, and 32 bytes is the widest a single access can be. Needs shaderInt64.
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require

vec4 low4(u64vec4 u) { return uintBitsToFloat(uvec4(unpack32(u.x), unpack32(u.y))); }
vec4 high4(u64vec4 u) { return uintBitsToFloat(uvec4(unpack32(u.z), unpack32(u.w))); }

u64vec4 pack8(vec4 lo, vec4 hi) {
    const uvec4 a = floatBitsToUint(lo), b = floatBitsToUint(hi);
    return u64vec4(pack64(a.xy), pack64(a.zw), pack64(b.xy), pack64(b.zw));
}
