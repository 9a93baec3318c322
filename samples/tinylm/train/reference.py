"""Checks model.py's attention against naive quadratic evaluations of docs/MATH.md, in float64.

  polysketch (block algorithm, section 6) vs w_ij = <phi(s LN q_i), phi(LN k_j)> for j <= i, with
      phi = psi(S(.)) materialized (the packed self-tensor of section 3), and the exact local weights
      (s LN q_i . LN k_j)^4 when j is in i's block (local exact); O = W V / (1 + W 1)
  for the learned sketch (section 4) and the random sketch (section 3), local exact or not, several
  lengths (multiples of b and not, shorter than one block), q/k LayerNorm with non-trivial
  parameters; also psi's identity <psi(u), psi(w)> = <u, w>^2, the exact polynomial attention
  against a loop, softmax on the q/k LayerNorm (softmax_qknorm) against a loop, and a whole-model
  forward (float64) against a per-token loop of the layers.

Run: .venv-train/bin/python samples/tinylm/train/reference.py   (exit status 0 when all agree)
"""
import math
import sys

import torch

sys.path.insert(0, __file__.rsplit("/", 1)[0])
import model as M  # noqa: E402

TOL = 1e-10


def naive_psi(u):
    r = u.shape[-1]
    feats = [u[..., a] ** 2 for a in range(r)]
    for a in range(r):
        for b in range(a + 1, r):
            feats.append(math.sqrt(2.0) * u[..., a] * u[..., b])
    return torch.stack(feats, dim=-1)


def naive_polysketch(q, k, v, ln_scale, ln_bias, s, sketch, block, local_exact, p=4):
    """One head: q, k [n, h], v [n, dv]; every weight on its own, per the definition."""
    n = q.shape[0]
    qn = s * ((q - q.mean(-1, keepdim=True)) / torch.sqrt(q.var(-1, unbiased=False, keepdim=True) + 1e-5) * ln_scale + ln_bias)
    kn = (k - k.mean(-1, keepdim=True)) / torch.sqrt(k.var(-1, unbiased=False, keepdim=True) + 1e-5) * ln_scale + ln_bias
    phiq, phik = naive_psi(sketch(qn)), naive_psi(sketch(kn))
    out = torch.zeros_like(v)
    for i in range(n):
        num = torch.zeros(v.shape[1], dtype=v.dtype)
        den = torch.zeros((), dtype=v.dtype)
        for j in range(i + 1):
            if local_exact and i // block == j // block:
                w = torch.dot(qn[i], kn[j]) ** p
            else:
                w = torch.dot(phiq[i], phik[j])
            num += w * v[j]
            den += w
        out[i] = num / (1 + den)
    return out


def naive_polynomial(qs, kn, v, p=4):
    n = qs.shape[0]
    out = torch.zeros_like(v)
    for i in range(n):
        w = torch.stack([torch.dot(qs[i], kn[j]) ** p for j in range(i + 1)])
        out[i] = (w[:, None] * v[: i + 1]).sum(0) / (1 + w.sum())
    return out


def rel_err(a, b):
    return ((a - b).abs().max() / max(1.0, b.abs().max().item())).item()


def main():
    torch.manual_seed(0)
    dt = torch.float64
    failures = 0

    def check(what, got, want, tol=TOL):
        nonlocal failures
        e = rel_err(got, want)
        ok = e <= tol
        failures += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {what}: max |diff| / max(1, max |ref|) = {e:.3e}")

    # psi's identity
    u, w = torch.randn(5, 16, dtype=dt), torch.randn(5, 16, dtype=dt)
    check("psi packing vs naive", M.self_tensor(u), naive_psi(u))
    check("<psi(u), psi(w)> = <u, w>^2", (M.self_tensor(u) * M.self_tensor(w)).sum(-1), (u * w).sum(-1) ** 2)

    h, r, dv = 32, 16, 32
    for kind in ("learned", "random"):
        cfg = M.Config(vocab_size=10, d_model=4 * h, n_heads=4, attention="polysketch_" + kind,
                       sketch_size=r, block_size=16, scale=0.25)
        attn = M.Attention(cfg, 0).to(dt)
        with torch.no_grad():
            attn.ln_scale.copy_(1 + 0.3 * torch.randn(h, dtype=dt))
            attn.ln_bias.copy_(0.2 * torch.randn(h, dtype=dt))
            if kind == "learned":
                for br in (attn.f1, attn.f2):
                    for lv in br.levels:
                        lv.ln_scale.copy_(1 + 0.3 * torch.randn_like(lv.ln_scale))
                        lv.ln_bias.copy_(0.2 * torch.randn_like(lv.ln_bias))
        for n, block in ((40, 16), (48, 16), (7, 16), (33, 32), (64, 16)):
            for local_exact in (True, False):
                q, k, v = (torch.randn(2, 3, n, d, dtype=dt) for d in (h, h, dv))
                with torch.no_grad():
                    qs = cfg.scale * M.layer_norm(q, attn.ln_scale, attn.ln_bias)
                    kn = M.layer_norm(k, attn.ln_scale, attn.ln_bias)
                    got = M.polysketch_causal(qs, kn, v, attn.sketch(qs), attn.sketch(kn), block, local_exact)
                    want = torch.stack([torch.stack([
                        naive_polysketch(q[b0, h0], k[b0, h0], v[b0, h0], attn.ln_scale, attn.ln_bias, cfg.scale,
                                         attn.sketch, block, local_exact)
                        for h0 in range(3)]) for b0 in range(2)])
                check(f"polysketch {kind:7s} n={n:3d} b={block:2d} local_exact={int(local_exact)} vs naive", got, want)

    # exact polynomial
    qs, kn, v = (torch.randn(1, 2, 37, d, dtype=dt) * 0.5 for d in (h, h, dv))
    got = M.polynomial_causal(qs, kn, v)
    want = torch.stack([naive_polynomial(qs[0, i], kn[0, i], v[0, i]) for i in range(2)])[None]
    check("polynomial vs naive", got, want)

    # softmax on the q/k LayerNorm: one attention layer against a loop over its definition
    # (LN after RoPE, shared by q, k and the heads; softmax of LN(q_i) . LN(k_j) / sqrt(h) over j <= i)
    cfg = M.Config(vocab_size=10, d_model=2 * h, n_heads=2, attention="softmax_qknorm")
    attn = M.Attention(cfg, 0).to(dt)
    with torch.no_grad():
        attn.ln_scale.copy_(1 + 0.3 * torch.randn(h, dtype=dt))
        attn.ln_bias.copy_(0.2 * torch.randn(h, dtype=dt))
        n = 23
        x = torch.randn(1, n, 2 * h, dtype=dt)
        cos, sin = M.rope_tables(n, h, cfg.rope_base, dt)
        got = attn(x, cos, sin)
        qkv = x[0] @ attn.wqkv
        heads = []
        for j in range(2):
            q, k, v = (qkv[:, c * 2 * h + j * h:c * 2 * h + (j + 1) * h] for c in range(3))
            q, k = M.apply_rope(q, cos, sin), M.apply_rope(k, cos, sin)
            qn, kn = ((t - t.mean(-1, keepdim=True)) / torch.sqrt(t.var(-1, unbiased=False, keepdim=True) + 1e-5)
                      * attn.ln_scale + attn.ln_bias for t in (q, k))
            o = torch.zeros(n, h, dtype=dt)
            for i in range(n):
                w = torch.exp(torch.stack([torch.dot(qn[i], kn[t]) / math.sqrt(h) for t in range(i + 1)]))
                o[i] = (w[:, None] * v[:i + 1]).sum(0) / w.sum()
            heads.append(o)
        want = (torch.cat(heads, dim=-1) @ attn.wo)[None]
    check("softmax_qknorm layer vs naive", got, want)

    # a whole model: the full-sequence forward vs prefixes (causality: row i depends on tokens <= i only)
    for attention in M.ATTENTION_KINDS:
        cfg = M.Config(vocab_size=20, d_model=64, n_heads=2, attention=attention, sketch_size=8, block_size=16)
        net = M.TinyLM(cfg).to(dt)
        toks = torch.randint(0, 20, (1, 45))
        with torch.no_grad():
            full = net(toks)
            for m in (1, 16, 17, 30):
                check(f"model {attention:18s} causal: prefix {m:2d} vs full", net(toks[:, :m]), full[:, :m])

    # RoPE table: float64 angle, then float32
    cos, sin = M.rope_tables(40000, 32, 10000, torch.float32)
    i, c = 32768, 0
    want = math.cos(i * 10000 ** (-2 * c / 32))
    check("RoPE table at 32768 (float32 rounding of a float64 cos)", cos[i, c].double(), torch.tensor(want), 6e-8)

    print("all agree" if failures == 0 else f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
