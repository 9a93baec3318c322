#version 450
// Copies rows between two strided tensors of the storage type: for every (batch, head) of the
// dispatch, rows [0, rows) of `dim` elements from src_base + batch * src.batch + head * src.head +
// row * src.token to the same place under dst's base and strides. Forward calls with a decode
// state (docs/DECODING.md, "State passing") stage the call's rows behind the unfinished block's
// rows, copy the produced rows out, and gather the rows a state keeps; the app's tensors may have
// any strides, so this is a kernel rather than one copy region per row. One element per
// invocation, no loop. Built a second time as copy_rows_convert, between the storage type and the
// float32 of a decode state (16-bit attention objects): CONVERT_TO_F32 reads the storage type and
// writes float32 (exact), CONVERT_FROM_F32 reads float32 and stores the storage type (STORE_ELEM:
// round to nearest even, as the forward's stores).

#include "storage.glsl"

layout(local_size_x_id = 0) in;
#include "interface/copy_rows.h"
PSK_DECLARE_SPECS(PSK_COPY_ROWS_SPEC)
PSK_DECLARE_BINDINGS(PSK_COPY_ROWS_BINDINGS)

#if defined(CONVERT_TO_F32)
layout(std430, binding = BINDING_SRC) readonly buffer Src { ELEM src[]; };
layout(std430, binding = BINDING_DST) writeonly buffer Dst { float dst[]; };
#define MOVE(x) LOAD_ELEM(x)
#elif defined(CONVERT_FROM_F32)
layout(std430, binding = BINDING_SRC) readonly buffer Src { float src[]; };
layout(std430, binding = BINDING_DST) writeonly buffer Dst { ELEM dst[]; };
#define MOVE(x) STORE_ELEM(x)
#else
layout(std430, binding = BINDING_SRC) readonly buffer Src { ELEM src[]; };
layout(std430, binding = BINDING_DST) writeonly buffer Dst { ELEM dst[]; };
#define MOVE(x) (x)
#endif

void main() {
    const uint i = (gl_WorkGroupID.y * params.groups_x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (i >= params.rows * params.dim) return;
    const uint row = i / params.dim, d = i % params.dim;
    const uint batch = params.batch_base + gl_WorkGroupID.z / params.heads, head = gl_WorkGroupID.z % params.heads;
    dst[params.dst_base + batch * params.dst.batch + head * params.dst.head + row * params.dst.token + d] =
        MOVE(src[params.src_base + batch * params.src.batch + head * params.src.head + row * params.src.token + d]);
}
