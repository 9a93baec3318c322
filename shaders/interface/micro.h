// Kernel interface of micro_barrier.comp, micro_chase.comp, micro_inflight.comp,
// micro_shared_store.comp and micro_coopmat.comp (see common.h): the micro-kernels of `psk micro`
// (tools only; no forward or decode ever runs them), which measure machine constants
// docs/predictions.py assumes: the workgroup barrier round, the latency of a dependent load that
// hits L2 or goes to HBM, how many loads an invocation keeps in flight (as the kernels write their
// staging: a loop whose count is a literal, a specialization constant or a run-time value, and
// loads issued before a barrier and used after it), the cost of staging 16-bit operands in shared
// memory 2 bytes or 16 bytes per store, and the rate of cooperative-matrix products with their
// operands in registers or loaded from shared memory the ways the cooperative kernels load them.
#ifndef PSK_INTERFACE_MICRO_H
#define PSK_INTERFACE_MICRO_H

#include "common.h"

// micro_barrier.comp
#define PSK_MICRO_BARRIER_SPEC(X) \
    X(0, uint, THREADS, 128) /* invocations per workgroup (local_size_x_id = 0) */

// micro_barrier.comp
#define PSK_MICRO_BARRIER_BINDINGS(X) \
    X(0, RESULT, write) /* one uint per invocation: its value after the last round */

// micro_shared_store.comp (its one binding is micro_barrier.comp's list: PSK_MICRO_BARRIER_BINDINGS)
#define PSK_MICRO_SHARED_STORE_SPEC(X) \
    X(0, uint, THREADS, 128) /* invocations per workgroup (local_size_x_id = 0); divides 512 */ \
    X(1, uint, PACKED, 0)    /* 0: a 16-byte chunk as eight 16-bit stores; 1: as one 16-byte (uvec4) store; 2: eight 16-bit stores, each warp's contiguous (no bank conflicts) */

// micro_coopmat.comp (its one binding is micro_barrier.comp's list: RESULT holds the float32
// accumulators, CM_M x CM_N row-major, per subgroup and accumulator)
#define PSK_MICRO_COOPMAT_SPEC(X) \
    X(0, uint, THREADS, 128) /* SUBGROUPS x the subgroup size (local_size_x_id = 0) */ \
    X(1, uint, CM_M, 16) \
    X(2, uint, CM_N, 16) \
    X(3, uint, CM_K, 16) \
    X(4, uint, SUBGROUPS, 4) /* subgroups per workgroup */ \
    X(5, uint, FORM, 0) /* PSK_MICRO_COOPMAT_* below: where each product's operands come from */

#define PSK_MICRO_COOPMAT_REGISTERS 0u  // A and the B operands loaded once, before the loop: the product rate alone
#define PSK_MICRO_COOPMAT_RELOAD 1u     // every product loads its own A and B from a 16-bit shared array (the feature map's pattern)
#define PSK_MICRO_COOPMAT_REUSE_A 2u    // one A load per step, then each accumulator's B (the output's and the block states' pattern)
#define PSK_MICRO_COOPMAT_PACKED 3u     // as RELOAD, from a uvec4 array (CM_LOAD_ROW_A_V: the packed operand pools)
#define PSK_MICRO_COOPMAT_WN 4u         // accumulators per subgroup
#define PSK_MICRO_COOPMAT_TILES 4u      // A and B tiles in shared memory, chosen per step and accumulator

// micro_chase.comp (one invocation; no specialization constants)
#define PSK_MICRO_CHASE_BINDINGS(X) \
    X(0, CHAIN, read) /* next[i]: element index of the next line, a single cycle over the lines */ \
    X(1, RESULT, write) /* one uint: the index after the last step */

// micro_inflight.comp: every invocation of a workgroup follows the same INFLIGHT_CHAINS chains of
// micro_chase.comp's cycle (so each load is one line for the whole subgroup), one load per chain
// and round, with or without a dependent integer computation (INFLIGHT_WORK_STEPS steps) and two
// barriers in each round (FORM).
#define PSK_MICRO_INFLIGHT_SPEC(X) \
    X(0, uint, THREADS, 128) /* invocations per workgroup (local_size_x_id = 0) */ \
    X(1, uint, LOADS, 8)     /* the 'spec' form's loads per round (<= INFLIGHT_CHAINS): its loops' count */ \
    X(2, uint, FORM, 0)      /* PSK_MICRO_INFLIGHT_* below */

#define PSK_MICRO_INFLIGHT_LITERAL 0u        // INFLIGHT_CHAINS loads per round, loops over a literal count (unrolled when compiled)
#define PSK_MICRO_INFLIGHT_SPEC_COUNT 1u     // the same loops over LOADS, a specialization constant (left to the driver)
#define PSK_MICRO_INFLIGHT_RUNTIME 2u        // the same loops over a push constant (no compiler can unroll them)
#define PSK_MICRO_INFLIGHT_WORK 3u           // no loads: INFLIGHT_WORK_STEPS dependent steps per round
#define PSK_MICRO_INFLIGHT_LOADS_WORK 4u     // the literal form's loads issued, the work, then the loads used
#define PSK_MICRO_INFLIGHT_WORK_BARRIERS 5u  // no loads: barrier, the work, barrier
#define PSK_MICRO_INFLIGHT_LOADS_BARRIERS 6u // the loads issued, barrier, the work, barrier, the loads used (the kernels' prefetch)
#define PSK_MICRO_INFLIGHT_FORMS 7u
#define INFLIGHT_CHAINS 8u                   // chains per workgroup (the literal count)
#define INFLIGHT_WORK_STEPS 32u              // steps of x = (x ^ (x >> 13)) * 0x5BD1E995 per round

// micro_inflight.comp
#define PSK_MICRO_INFLIGHT_BINDINGS(X) \
    X(0, CHAIN, read) /* micro_chase.comp's cycle: the first uint of each line is the next line's element index */ \
    X(1, STARTS, read) /* INFLIGHT_CHAINS element indices per workgroup: where its chains start */ \
    X(2, RESULT, write) /* one uint per invocation (its x after the last round), then INFLIGHT_CHAINS per workgroup (where its chains end) */

// The kernels' push constants (one block, as block_scan.h's two kernels share theirs).
PSK_PUSH_BEGIN(MicroPush)
    uint iterations;  // barrier: rounds (a neighbour's shared value loaded, barrier, own value stored,
                      // barrier); chase: dependent loads i = chain[i]; shared store: rounds (a
                      // 64 x 64 tile of 16-bit operands stored, barrier, one word read back, barrier);
                      // cooperative products: steps of PSK_MICRO_COOPMAT_WN products per subgroup;
                      // loads in flight: rounds
    uint seed;        // barrier, shared store, cooperative products, loads in flight: mixed into every invocation's start value (the host
                      // recomputes workgroups' values to check them)
    uint start;       // chase: element index of the first load; loads in flight: the run-time form's
                      // loads per round (<= INFLIGHT_CHAINS)
PSK_PUSH_END

#endif
