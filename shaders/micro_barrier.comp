#version 450
// psk micro (tools only): the workgroup barrier round. Each invocation loops `iterations` times
// over: load its neighbour's value from shared memory, barrier, store its own new value, barrier.
// Every round's value feeds the next (a multiply-add of the neighbour's value and the round index)
// and the last is written out, so the compiler can neither drop nor shorten the loop; the loop is
// not unrolled. The host recomputes workgroup 0's values to check that every round ran. The time
// of a dispatch over the iterations is one round: two barriers with one shared load and store.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
#include "interface/micro.h"
PSK_DECLARE_SPECS(PSK_MICRO_BARRIER_SPEC)
PSK_DECLARE_BINDINGS(PSK_MICRO_BARRIER_BINDINGS)

layout(std430, binding = BINDING_RESULT) writeonly buffer Result { uint result[]; };

shared uint values[THREADS];

void main() {
    const uint t = gl_LocalInvocationID.x;
    const uint neighbour = t + 1u == THREADS ? 0u : t + 1u;
    uint v = (t + 1u) * 2654435761u + params.seed + gl_WorkGroupID.x * 40503u;
    values[t] = v;
    barrier();
    [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
        const uint u = values[neighbour];
        barrier();  // every invocation has read before any overwrites
        v = v * 1664525u + u + i;
        values[t] = v;
        barrier();  // every store is visible before the next round's loads
    }
    result[gl_WorkGroupID.x * THREADS + t] = v;
}
