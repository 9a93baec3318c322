#version 450
// psk micro (tools only): the latency of a dependent load. One invocation follows i = chain[i] for
// `iterations` steps through a buffer the host filled with one random cycle over elements one
// 128-byte line apart, so every load is a new line and waits for the one before it; the last index
// is written out (the host checks it against its own walk of the cycle), so the loop cannot be
// removed or cut short unnoticed. The loop is not unrolled.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 1) in;
#include "interface/micro.h"
PSK_DECLARE_BINDINGS(PSK_MICRO_CHASE_BINDINGS)

layout(std430, binding = BINDING_CHAIN) readonly buffer Chain { uint chain[]; };
layout(std430, binding = BINDING_RESULT) writeonly buffer Result { uint result[]; };

void main() {
    uint i = params.start;
    [[dont_unroll]] for (uint s = 0u; s < params.iterations; ++s) i = chain[i];
    result[0] = i;
}
