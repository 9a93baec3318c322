// Packed self-tensoring (docs/MATH.md section 3): psi(u) = [u_a^2 for a] ++ [sqrt(2) u_a u_b for a < b],
// r(r+1)/2 entries with <psi(u), psi(w)> = <u, w>^2. Feature f is described by a pair table
// entry a | (b << 16) that the host computes once (squares first, then the pairs a-major), so a
// kernel that expands psi on the fly needs one table read and two multiplies per feature.
#ifndef PSK_SELF_TENSOR_GLSL
#define PSK_SELF_TENSOR_GLSL

const float SQRT2 = 1.4142135623730951;

uint pair_first(uint entry) { return entry & 0xFFFFu; }
uint pair_second(uint entry) { return entry >> 16; }
float pair_coefficient(uint entry) { return pair_first(entry) == pair_second(entry) ? 1.0 : SQRT2; }

#endif
