// Kernel interface of copy_rows.comp (see common.h): its specialization constants and push
// constants, declared once for GLSL and for the host (kernel_interface.hpp).
#ifndef PSK_INTERFACE_COPY_ROWS_H
#define PSK_INTERFACE_COPY_ROWS_H

#include "common.h"

// copy_rows.comp
#define PSK_COPY_ROWS_SPEC(X) \
    X(0, uint, WG, 64) /* invocations per workgroup, one element each */

// copy_rows.comp
#define PSK_COPY_ROWS_BINDINGS(X) \
    X(0, SRC, read) \
    X(1, DST, write)

PSK_PUSH_BEGIN(CopyRowsPush)
    uint dim;       // elements per row
    uint rows;      // rows per (batch, head)
    uint heads;     // heads per batch entry (gl_WorkGroupID.z = batch * heads + head, plus batch_base)
    uint groups_x;  // workgroups along x (the elements of one (batch, head) spread over x and y)
    uint src_base;  // element offset of row 0 of (batch 0, head 0)
    TensorStrides src;
    uint dst_base;
    TensorStrides dst;
    uint batch_base;  // first batch entry of this dispatch
PSK_PUSH_END

#endif
