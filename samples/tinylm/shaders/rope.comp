#version 450
// Rotary positions on q and k inside the qkv rows, in place ("rotate half": c pairs with c + h/2):
//   y[c] = x[c] cos - x[c + h/2] sin,  y[c + h/2] = x[c] sin + x[c + h/2] cos,
// cos and sin of theta_c = pos * base^(-2c/h) from the host's table (float64, rounded to float32).
// The first token's position: pos0, plus (posWord != ~0) the word posWord of `tokens`, which the host
// writes before each submission of a step recorded once and replayed (model.c, modelStep).
layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer QKV { float qkv[]; };
layout(std430, set = 0, binding = 1) readonly buffer Table { float table[]; };
layout(std430, set = 0, binding = 2) readonly buffer Tokens { uint tokens[]; };

layout(push_constant) uniform Push {
    uint n;        // tokens
    uint heads;    // H
    uint halfDim;  // h / 2
    uint pos0;     // position of the first token
    uint off;      // first row in qkv (elements)
    uint ld;       // qkv row stride (elements)
    uint kOff;     // k's segment offset within a row (q is at 0)
    uint sinOff;   // the sin table's offset in `table` (cos at 0); both [positions, h/2]
    uint posWord;  // ~0u, or the word of `tokens` holding the position added to pos0
} p;

void main() {
    const uint idx = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * 64u + gl_LocalInvocationID.x;
    if (idx >= p.n * p.heads * p.halfDim) return;
    const uint c = idx % p.halfDim;
    const uint j = (idx / p.halfDim) % p.heads;
    const uint t = idx / (p.halfDim * p.heads);
    const uint pos0 = p.pos0 + (p.posWord != 0xFFFFFFFFu ? tokens[p.posWord] : 0u);
    const uint at = (pos0 + t) * p.halfDim + c;
    const float cs = table[at], sn = table[p.sinOff + at];
    const uint base = p.off + t * p.ld + j * 2u * p.halfDim + c;
    for (uint s = 0u; s < 2u; ++s) {
        const uint i = base + s * p.kOff;
        const float x1 = qkv[i], x2 = qkv[i + p.halfDim];
        qkv[i] = x1 * cs - x2 * sn;
        qkv[i + p.halfDim] = x1 * sn + x2 * cs;
    }
}
