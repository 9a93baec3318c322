"""An independent float64 evaluation of a tinylm model file, written from samples/tinylm/MODEL.md and
docs/MATH.md with numpy only (no model.py, no torch): the quadratic definition of every attention
kind (w_ij one by one, no blocks), compared with the golden file's PyTorch logits under MODEL.md's
criterion max |ours - torch| / max(1, max |torch|) <= 1e-4. With an evaluation file it also
recomputes the exact-match result of the first examples and compares it with eval_correct.

  .venv-train/bin/python samples/tinylm/train/check_model.py samples/tinylm/models/bytes_polysketch.safetensors
"""
import argparse
import math
import os
import sys

import numpy as np
from safetensors import safe_open


def read(path):
    with safe_open(path, framework="np") as f:
        return f.metadata() or {}, {k: f.get_tensor(k) for k in f.keys()}


def ln(x, scale, bias):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-5) * scale + bias


def gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def psi(u):
    r = u.shape[-1]
    ia, ib = np.triu_indices(r, 1)
    return np.concatenate([u * u, math.sqrt(2) * u[..., ia] * u[..., ib]], -1)


def forward(md, w, tokens):
    D, L, H = int(md["d_model"]), int(md["n_layers"]), int(md["n_heads"])
    h = D // H
    n = len(tokens)
    base = float(md["rope_base"])
    c = np.arange(h // 2)
    theta = np.arange(n)[:, None] * (base ** (-2.0 * c / h))[None, :]
    cos = np.cos(theta).astype(np.float32).astype(np.float64)
    sin = np.sin(theta).astype(np.float32).astype(np.float64)
    g = {k: v.astype(np.float64) for k, v in w.items()}
    kind = md["attention"]
    s = float(md["scale"])
    causal = np.tril(np.ones((n, n), dtype=bool))

    def rope(x):
        x1, x2 = x[:, :h // 2], x[:, h // 2:]
        return np.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    x = g["tok_emb"][tokens]
    for l in range(L):
        p = f"layers.{l}."
        a = ln(x, g[p + "ln1.scale"], g[p + "ln1.bias"])
        qkv = a @ g[p + "attn.wqkv"]
        o = np.zeros((n, D))
        for j in range(H):
            q = rope(qkv[:, j * h:(j + 1) * h])
            k = rope(qkv[:, D + j * h:D + (j + 1) * h])
            v = qkv[:, 2 * D + j * h:2 * D + (j + 1) * h]
            if kind == "softmax":
                z = np.where(causal, s * q @ k.T, -np.inf)
                z = np.exp(z - z.max(-1, keepdims=True))
                o[:, j * h:(j + 1) * h] = (z / z.sum(-1, keepdims=True)) @ v
                continue
            qs = s * ln(q, g[p + "attn.ln.scale"], g[p + "attn.ln.bias"])
            kn = ln(k, g[p + "attn.ln.scale"], g[p + "attn.ln.bias"])
            exact = (qs @ kn.T) ** int(md["degree"])
            if kind == "polynomial":
                wts = exact
            else:
                r = int(md["sketch_size"])
                if md["sketch"] == "learned":
                    def S(y):
                        br = []
                        for f in (1, 2):
                            u = y
                            for lv in (0, 1):
                                t = f"{p}attn.f{f}.{lv}."
                                u = gelu(ln(u, g[t + "ln.scale"], g[t + "ln.bias"]) @ g[t + "dense1"]) @ g[t + "dense2"]
                            br.append(u)
                        return math.sqrt(r) * np.tanh(br[0] * br[1] / math.sqrt(r))
                else:
                    assert md["scaling"] == "unbiased"
                    def S(y):
                        return math.sqrt(1 / r) * (y @ g[p + "attn.g1_0a"]) * (y @ g[p + "attn.g1_0b"])
                wts = psi(S(qs)) @ psi(S(kn)).T
                if md["local_exact"] == "1":
                    b = int(md["block_size"])
                    same = (np.arange(n)[:, None] // b) == (np.arange(n)[None, :] // b)
                    wts = np.where(same, exact, wts)
            wts = np.where(causal, wts, 0.0)
            o[:, j * h:(j + 1) * h] = (wts @ v) / (1 + wts.sum(-1, keepdims=True))
        x = x + o @ g[p + "attn.wo"]
        m = ln(x, g[p + "ln2.scale"], g[p + "ln2.bias"])
        x = x + gelu(m @ g[p + "mlp.w1"]) @ g[p + "mlp.w2"]
    return ln(x, g["ln_f.scale"], g["ln_f.bias"]) @ g["tok_emb"].T


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--eval-examples", type=int, default=20, help="examples of the eval file to recompute")
    a = ap.parse_args()
    md, w = read(a.model)
    for t in w.values():
        assert t.dtype == np.float32, t.dtype
    stem = a.model[:-len(".safetensors")]
    gmd, gold = read(stem + ".golden.safetensors")
    assert gmd["model"] == os.path.basename(a.model)
    ours = forward(md, w, gold["tokens"].astype(np.int64))
    ref = gold["logits"].astype(np.float64)
    err = np.abs(ours - ref).max() / max(1.0, np.abs(ref).max())
    ok = err <= 1e-4
    print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(a.model)} ({md['attention']}{' ' + md.get('sketch', '') if md['attention'] == 'polysketch' else ''}): "
          f"golden logits [{ref.shape[0]} x {ref.shape[1]}], max |float64 - torch| / max(1, max |torch|) = {err:.2e}")
    if "eval_correct" in gold and a.eval_examples:
        emd, ev = read(os.path.join(os.path.dirname(a.model), gmd["eval_file"]))
        inputs, starts = ev["inputs"].astype(np.int64), ev["answer_start"]
        agree = 0
        m = min(a.eval_examples, len(inputs))
        for e in range(m):
            lg = forward(md, w, inputs[e])
            st = int(starts[e])
            corr = bool((lg[st - 1:-1].argmax(-1) == inputs[e, st:]).all())
            agree += corr == bool(gold["eval_correct"][e])
        print(f"{'ok  ' if agree == m else 'FAIL'} eval_correct agrees on {agree}/{m} examples "
              f"(PyTorch's exact match over all {len(inputs)}: {gold['eval_correct'].mean():.4f})")
        ok = ok and agree >= m - 1  # a near-tie argmax may flip between float32 and float64
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
