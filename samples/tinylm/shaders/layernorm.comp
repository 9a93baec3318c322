#version 450
// LayerNorm over rows of `dim` floats: y = (x - mean) / sqrt(var + 1e-5) * scale + bias, population
// variance, two passes over the row. Row r is (token t = r / heads, head j = r % heads) at
// off + t * stride + j * headStride, so one dispatch normalizes the model's rows [n, D] (heads 1)
// or each head of q or k inside the qkv rows (heads H, dim h). In place when X and Y alias.
// One invocation per row: no shared memory and no barriers (cheap on CPU drivers; the rows are
// short).
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Y { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weights { float w[]; };

layout(push_constant) uniform Push {
    uint rows;
    uint dim;
    uint heads;
    uint headStride;
    uint inOff;
    uint inStride;
    uint outOff;
    uint outStride;
    uint scaleOff;   // in `w`
    uint biasOff;    // in `w`
} p;

void main() {
    const uint row = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (row >= p.rows) return;
    const uint t = row / p.heads, j = row % p.heads;
    const uint inBase = p.inOff + t * p.inStride + j * p.headStride;
    const uint outBase = p.outOff + t * p.outStride + j * p.headStride;
    float s = 0.0;
    for (uint i = 0u; i < p.dim; ++i) s += x[inBase + i];
    const float mean = s / float(p.dim);
    float s2 = 0.0;
    for (uint i = 0u; i < p.dim; ++i) {
        const float c = x[inBase + i] - mean;
        s2 += c * c;
    }
    const float rstd = 1.0 / sqrt(s2 / float(p.dim) + 1e-5);
    // Each element is read before it is written, by the same invocation: in place is safe.
    for (uint i = 0u; i < p.dim; ++i) y[outBase + i] = (x[inBase + i] - mean) * rstd * w[p.scaleOff + i] + w[p.biasOff + i];
}
