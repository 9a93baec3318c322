// Kernel interface of block_reduce.comp and block_scan.comp (see common.h): its specialization
// constants and push constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_BLOCK_SCAN_H
#define PSK_INTERFACE_BLOCK_SCAN_H

#include "common.h"

// block_scan.comp
#define PSK_BLOCK_SCAN_SPEC(X) \
    X(0, uint, WORKGROUP, 128) /* invocations, a multiple of the subgroup size */ \
    X(1, uint, LANES, 8) /* tree lanes per column, a power of two */

// block_reduce.comp
#define PSK_BLOCK_REDUCE_SPEC(X) \
    X(0, uint, WORKGROUP, 128) /* invocations, a multiple of the subgroup size */ \
    X(1, uint, LANES, 8) /* lanes per column, a power of two */

// block_scan.comp
#define PSK_BLOCK_SCAN_BINDINGS(X) \
    X(0, STATES, read_write) /* the block states, scanned in place */ \
    X(1, INIT_Z, read) /* a decode state's prefix z */ \
    X(2, INIT_H, read) /* ... and its unfinished block's h */ \
    X(3, TAIL, write) /* what the decode state keeps after the call */

// block_reduce.comp
#define PSK_BLOCK_REDUCE_BINDINGS(X) \
    X(0, STATES, read_write) /* the block states, summed into block 0 */

PSK_PUSH_BEGIN(BlockColumnsPush)
    uint blocks;      // t: blocks per sequence-head
    uint columns;     // columns of one block state, in vec4 when vectorized, else in floats
    uint groups_x;    // workgroups along x (column groups are split over x and y)
    uint vectorized;  // 1: states4 with columns = elems / 4; 0: states with columns = elems
    // block_scan.comp only: an initial prefix (a decode state's z, docs/DECODING.md "State passing").
    // init_row 0: none. Otherwise z (binding 1) and h (binding 2) hold [sequence][F][init_row] floats
    // from element init_base on, the states rows are init_stride floats (columns c >= init_row of a
    // row start from 0): every Z_l starts from z, and with init_h != 0 block 0's H_0 gets h added.
    uint init_row;
    uint init_stride;
    uint init_base;
    uint init_h;
    // block_scan.comp with an initial prefix only: what the state needs after the call, written to
    // binding 3 as [part][sequence][elems] floats (the states' rows) so that the decode state does
    // not fold the last block's rows again. 0: nothing. 1 (the state's running sum takes every
    // block): the inclusive prefix at the last block, Z_{t-1} + H_{t-1}. 2 (local exact, the last
    // block unfinished): Z_{t-1}, then, after all sequences, the last block's own H_{t-1} (with h
    // added when it is block 0 and init_h is set).
    uint tail_mode;
PSK_PUSH_END

#endif
