// psk bench: statistics of the timed runs and the effective FLOP counts of each kind.
//
// FLOP counts (a multiply-add is 2 FLOPs; exponentials, powers, divisions, normalizations and
// other elementwise work are not counted, so the numbers compare kinds by the matrix work they must
// do). With B batch, Hq query heads, Hkv key/value heads, n tokens, h head dim, dv value dim:
//
//   softmax, poly:  2 * B * Hq * P * (h + dv)      P = n(n+1)/2 pairs causal, n^2 full
//
//   polysketch (p = 2m, sketch size r, block size b, t = ceil(n/b) blocks; for p = 2 the sketch is
//   the identity, so r stands for h; F = r(r+1)/2 packed features):
//     sketch    B * (Hq + Hkv) * n * (S + F)       S = 2 m h r + (m/2 - 1) 4 r^2 per row (p >= 4;
//                                                 S = 0 for p = 2); F: the self-tensoring products
//     states    2 * B * Hkv * n * F * (dv + 1)     H_l = phi(K_l)^T [V_l | 1]
//     prefix    B * Hkv * t * F * (dv + 1)         exclusive scan (causal) or total sum (full)
//     output    2 * B * Hq * n * F * (dv + 1)      phi(q_i)^T Z_l
//     local     B * Hq * L * (w + 2 (dv + 1))      causal only; L = sum over blocks of len(len+1)/2
//                                                 pairs, w = 2h (local exact) or 2r (sketched:
//                                                 <S(q), S(k)>^2 equals <phi(q), phi(k)>)
//
// Compulsory HBM bytes per polysketch stage (stageBytes; e the storage type's bytes, Z = dv + 1
// rounded up to 4 floats per state row, t blocks; the float32 intermediates as the kernels keep
// them):
//     features  (B Hq + B Hkv) n (h e + 4 r)            q, k in; S(q), S(k) out
//               + (B Hq + B Hkv) n 4 h (local exact)    q', k' out
//     states    B Hkv n (4 r + dv e) + B Hkv t F Z 4    S(k), v in; H_l out
//     prefix    2 B Hkv t F Z 4                          H_l in, Z_l out (full: the sum out, B Hkv F Z 4)
//     output    B Hq n (4 r + dv e) + B Hkv t F Z 4      S(q) in, O out; Z_l in (once per head; full:
//                                                        the sum, B Hkv F Z 4)
//               + causal: B Hq n 4 w_q + B Hkv n (4 w_k + dv e)   the local part's rows
//                 (w = h local exact, q', k'; w = r sketched, S(q), S(k) again)
//   With the cooperative output computing the query side (fusedQuery: the plan's FUSED_QUERY),
//   the feature map moves the k side alone and the output reads q (B Hq n h e, once: the tile's
//   rows come from L2 the second time) instead of S(q) and q'.
//   With Z packed as the cooperative output's operands (z_operands.comp, recorded in the output's
//   stage; zOperandBytes: the records of the call), the stage also writes the records once and
//   reads them once instead of Z: + 2 x zOperandBytes (Z is then read by the packing kernel).
//   Where the packing walks the blocks (zWalk: z_operands.comp WALK = 1, recorded in the prefix's
//   stage instead of the scan), the prefix reads H_l and writes the records (B Hkv t F Z 4 +
//   zOperandBytes) and the output reads the records alone (+ zOperandBytes, no Z).
#include <algorithm>

#include "bench.hpp"

namespace psk::bench {

Timing summarize(std::vector<double> s) {
    Timing t;
    if (s.empty()) return t;
    std::sort(s.begin(), s.end());
    const size_t m = s.size() / 2;
    t.medianMs = s.size() % 2 ? s[m] : 0.5 * (s[m - 1] + s[m]);
    t.minMs = s.front();
    t.maxMs = s.back();
    double sum = 0;
    for (double x : s) sum += x;
    t.meanMs = sum / double(s.size());
    return t;
}

double sketchLength(const Config& c) {
    const uint32_t p = c.degree ? c.degree : 4;
    return p == 2 ? c.headDim : (c.sketchSize ? c.sketchSize : 32);
}

uint64_t polysketchBlocks(const Config& c) {
    const uint64_t b = c.blockSize ? c.blockSize : 256;
    return (uint64_t(c.n) + b - 1) / b;
}

double flops(const Config& c) {
    const double B = c.batch, Hq = c.heads, Hkv = c.kvHeads, n = c.n, h = c.headDim, dv = c.valueDim;
    if (c.kind != PSK_ATTENTION_KIND_POLYSKETCH) {
        const double pairs = c.causal ? n * (n + 1) / 2 : n * n;
        return 2 * B * Hq * pairs * (h + dv);
    }
    const uint32_t p = c.degree ? c.degree : 4, m = p / 2;
    const double r = sketchLength(c), F = r * (r + 1) / 2;
    // A learned sketch: two branches of two FF levels, h -> 8r -> r and r -> 8r -> r (docs/MATH.md
    // section 4), 32 h r + 96 r^2 FLOP of products per row (docs/PERFORMANCE.md, the predictions).
    const double sketchPerRow = p == 2 ? 0 : c.learned ? 32.0 * h * r + 96.0 * r * r : 2.0 * m * h * r + (m / 2.0 - 1) * 4 * r * r;
    const uint64_t b = c.blockSize ? c.blockSize : 256;
    const uint64_t blocks = polysketchBlocks(c);

    const double sketch = B * (Hq + Hkv) * n * (sketchPerRow + F);
    const double states = 2 * B * Hkv * n * F * (dv + 1);
    const double prefix = B * Hkv * double(blocks) * F * (dv + 1);
    const double output = 2 * B * Hq * n * F * (dv + 1);
    double local = 0;
    if (c.causal) {
        const uint64_t full = c.n / b, tail = c.n % b;
        const double pairs = double(full) * double(b) * double(b + 1) / 2 + double(tail) * double(tail + 1) / 2;
        const double w = c.localExact ? 2 * h : 2 * r;
        local = B * Hq * pairs * (w + 2 * (dv + 1));
    }
    return sketch + states + prefix + output + local;
}

StageBytes stageBytes(const Config& c, bool fusedQuery, double zOperandBytes, bool zWalk) {
    StageBytes s;
    if (c.kind != PSK_ATTENTION_KIND_POLYSKETCH) return s;
    const double B = c.batch, Hq = c.heads, Hkv = c.kvHeads, n = c.n, h = c.headDim, dv = c.valueDim;
    const double e = c.dtype == PSK_DATA_TYPE_FLOAT32 ? 4 : 2;
    const double r = sketchLength(c), F = r * (r + 1) / 2;
    const double z = double((c.valueDim + 1 + 3) / 4 * 4);
    const double t = double(polysketchBlocks(c));
    const double rowsQ = B * Hq * n, rowsK = B * Hkv * n, states = B * Hkv * t * F * z * 4, sum = B * Hkv * F * z * 4;
    const double rowsF = fusedQuery ? rowsK : rowsQ + rowsK;  // rows through the feature map
    s.bytes[PSK_FORWARD_STAGE_FEATURE_MAP] = rowsF * (h * e + 4 * r) + (c.localExact ? rowsF * 4 * h : 0);
    s.bytes[PSK_FORWARD_STAGE_BLOCK_STATES] = rowsK * (4 * r + dv * e) + states;
    s.bytes[PSK_FORWARD_STAGE_PREFIX] = states + (c.causal ? states : sum);
    double output = rowsQ * ((fusedQuery ? h * e : 4 * r) + dv * e) + (c.causal ? states : sum);
    if (c.causal) {
        const double w = c.localExact ? h : r;
        output += (fusedQuery ? 0 : rowsQ * 4 * w) + rowsK * (4 * w + dv * e);
    }
    s.bytes[PSK_FORWARD_STAGE_OUTPUT] = output + 2 * zOperandBytes;
    if (zWalk && c.causal && zOperandBytes > 0) {
        s.bytes[PSK_FORWARD_STAGE_PREFIX] = states + zOperandBytes;
        s.bytes[PSK_FORWARD_STAGE_OUTPUT] = output - states + zOperandBytes;
    }
    return s;
}

}  // namespace psk::bench
