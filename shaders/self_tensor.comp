#version 450
// Materializes packed features phi(x) = psi(S(x)) for rows of sketches: out[row][f] =
// coef_f * s[row][a_f] * s[row][b_f]. The forward pass never runs this kernel (it expands psi on
// the fly inside block_states.comp and polysketch_output.comp from the same pair table); it is
// the self-tensoring unit on its own, for tests and for tools that want features.

#include "self_tensor.glsl"

layout(local_size_x = 64) in;

#include "interface/self_tensor.h"
PSK_DECLARE_BINDINGS(PSK_SELF_TENSOR_BINDINGS)

layout(std430, binding = BINDING_SKETCHES) readonly buffer Sketches { float sketches[]; };  // rows x sketch
layout(std430, binding = BINDING_PAIRS) readonly buffer Pairs { uint pairs[]; };         // features
layout(std430, binding = BINDING_FEATURES) writeonly buffer Features { float features[]; }; // rows x features

void main() {
    const uint f = gl_GlobalInvocationID.x;
    const uint row = gl_WorkGroupID.z * params.rows_y + gl_WorkGroupID.y;
    if (f >= params.features || row >= params.rows) return;
    const uint entry = pairs[f];
    const uint base = row * params.sketch;
    features[row * params.features + f] =
        pair_coefficient(entry) * sketches[base + pair_first(entry)] * sketches[base + pair_second(entry)];
}
