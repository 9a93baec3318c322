#version 450
// x[i, :] = tok_emb[tokens[i], :] for i < n (token ids checked against V on the host).
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Tokens { uint tokens[]; };
layout(std430, set = 0, binding = 1) readonly buffer Weights { float w[]; };
layout(std430, set = 0, binding = 2) writeonly buffer X { float x[]; };

layout(push_constant) uniform Push {
    uint n;        // tokens
    uint dim;      // D
    uint tokOff;   // first token in `tokens`
    uint embOff;   // tok_emb in `w` (elements)
    uint xOff;     // first row of x (elements)
} p;

void main() {
    const uint idx = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (idx >= p.n * p.dim) return;
    const uint i = idx / p.dim, d = idx % p.dim;
    x[p.xOff + idx] = w[p.embOff + tokens[p.tokOff + i] * p.dim + d];
}
