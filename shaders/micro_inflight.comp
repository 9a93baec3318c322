#version 450
// psk micro (tools only): how many loads an invocation keeps in flight, written the ways the
// kernels write their staging. Every invocation of a workgroup follows the same INFLIGHT_CHAINS
// chains through micro_chase.comp's cycle of 128-byte lines (i = chain[i], one load per chain and
// round; a subgroup's load is one line), so a round waits for one memory latency when its loads
// are in flight together and for INFLIGHT_CHAINS of them when each waits for the one before.
// FORM (interface/micro.h) picks how a round is written:
//   literal        the loads in a loop over a literal count: unrolled when the shader is compiled
//                  (glslc -O), the loads independent in the SPIR-V the driver gets;
//   spec           the same loop over LOADS, a specialization constant: its count is known only
//                  when the pipeline is created, so the driver has to unroll it (and keep the
//                  arrays in registers) itself. The kernels' staging loops are written this way;
//   runtime        the same loop over a push constant: no compiler can unroll it (the arrays are
//                  indexed at run time), the reference for a loop that stays rolled;
//   work           no loads: INFLIGHT_WORK_STEPS dependent integer steps per round (xor-shift and
//                  multiply: no compiler folds them into fewer);
//   loads+work     the literal form's loads issued, the work, then the loads used: the round
//                  takes max(latency, work) when the loads stay in flight under the work;
//   work+barriers  no loads: barrier, the work, barrier;
//   loads+barriers the loads issued, barrier, the work, barrier, the loads used: the kernels'
//                  prefetch of the next tile across their barriers (block_states_coopmat.comp's
//                  LOAD_KEY_TILE). max(latency, work + barriers) if a barrier leaves the loads in
//                  flight, latency + work + barriers if it waits for them.
// Each round's loaded indices feed the next round's loads and the invocation's value x, and x
// and the chains' last indices are written out: the host recomputes both (workgroup 0's and the
// last one's), so no loop can be dropped or cut short unnoticed. The round loop is not unrolled.

#extension GL_EXT_control_flow_attributes : require

layout(local_size_x_id = 0) in;
#include "interface/micro.h"
PSK_DECLARE_SPECS(PSK_MICRO_INFLIGHT_SPEC)
PSK_DECLARE_BINDINGS(PSK_MICRO_INFLIGHT_BINDINGS)

layout(std430, binding = BINDING_CHAIN) readonly buffer Chain { uint chain[]; };
layout(std430, binding = BINDING_STARTS) readonly buffer Starts { uint starts[]; };
layout(std430, binding = BINDING_RESULT) writeonly buffer Result { uint result[]; };

uint work(uint x) {
    [[unroll]] for (uint s = 0u; s < INFLIGHT_WORK_STEPS; ++s) x = (x ^ (x >> 13)) * 0x5BD1E995u;
    return x;
}

void main() {
    const uint t = gl_LocalInvocationID.x, group = gl_WorkGroupID.x;
    uint x = (t + 1u) * 2654435761u + params.seed + group * 40503u;
    uint idx[INFLIGHT_CHAINS];
    [[unroll]] for (uint k = 0u; k < INFLIGHT_CHAINS; ++k) idx[k] = starts[group * INFLIGHT_CHAINS + k];

    if (FORM == PSK_MICRO_INFLIGHT_SPEC_COUNT) {
        // Arrays and loops sized by the specialization constant, as the kernels' staging is.
        uint held[LOADS];
        [[unroll]] for (uint k = 0u; k < LOADS; ++k) held[k] = idx[k];
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
            uint v[LOADS];
            [[unroll]] for (uint k = 0u; k < LOADS; ++k) v[k] = chain[held[k]];
            [[unroll]] for (uint k = 0u; k < LOADS; ++k) {
                held[k] = v[k];
                x = x * 31u + v[k];
            }
        }
        [[unroll]] for (uint k = 0u; k < LOADS; ++k) idx[k] = held[k];
    } else if (FORM == PSK_MICRO_INFLIGHT_RUNTIME) {
        const uint loads = min(params.start, INFLIGHT_CHAINS);
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
            uint v[INFLIGHT_CHAINS];
            for (uint k = 0u; k < loads; ++k) v[k] = chain[idx[k]];
            for (uint k = 0u; k < loads; ++k) {
                idx[k] = v[k];
                x = x * 31u + v[k];
            }
        }
    } else if (FORM == PSK_MICRO_INFLIGHT_WORK || FORM == PSK_MICRO_INFLIGHT_WORK_BARRIERS) {
        const bool barriers = FORM == PSK_MICRO_INFLIGHT_WORK_BARRIERS;
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
            if (barriers) barrier();
            x = work(x);
            if (barriers) barrier();
            x = x * 31u + i;
        }
    } else {  // literal, loads+work, loads+barriers
        const bool busy = FORM != PSK_MICRO_INFLIGHT_LITERAL;
        const bool barriers = FORM == PSK_MICRO_INFLIGHT_LOADS_BARRIERS;
        [[dont_unroll]] for (uint i = 0u; i < params.iterations; ++i) {
            uint v[INFLIGHT_CHAINS];
            [[unroll]] for (uint k = 0u; k < INFLIGHT_CHAINS; ++k) v[k] = chain[idx[k]];
            if (barriers) barrier();
            if (busy) x = work(x);
            if (barriers) barrier();
            [[unroll]] for (uint k = 0u; k < INFLIGHT_CHAINS; ++k) {
                idx[k] = v[k];
                x = x * 31u + v[k];
            }
        }
    }

    result[group * THREADS + t] = x;
    if (t == 0u)
        [[unroll]] for (uint k = 0u; k < INFLIGHT_CHAINS; ++k) result[gl_NumWorkGroups.x * THREADS + group * INFLIGHT_CHAINS + k] = idx[k];
}
