"""The tinylm network of samples/tinylm/MODEL.md, in plain PyTorch.

Attention kinds (docs/MATH.md sections 2-6):
  softmax             F.scaled_dot_product_attention, causal, scale 1/sqrt(h)
  softmax_qknorm      the same softmax on the q/k LayerNorm of the other kinds (after RoPE, shared by
                      q, k and every head, scale still 1/sqrt(h)): softmax trained like polysketch.
                      PyTorch only: MODEL.md has no such model (the library's softmax kind takes no
                      q/k LayerNorm), so save_model refuses it
  polynomial          exact degree-4 polynomial attention with q/k LayerNorm: O = num / (1 + den)
  polysketch_learned  degree-4 polysketch, learned sketch (section 4), causal by blocks (section 6)
  polysketch_random   degree-4 polysketch, fixed Gaussian sketch (section 3, unbiased scaling)

The q/k LayerNorm (one scale/bias of length h per layer, shared by q, k and every head) applies
after RoPE; the score scale s multiplies LN(q) (LayerNorm first, then s; k is never scaled).

Everything here works in float32 (training, golden logits) and in float64 (train/reference.py
checks the block algorithm against a naive quadratic evaluation).
"""
import json
import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

LN_EPS = 1e-5
ATTENTION_KINDS = ("softmax", "softmax_qknorm", "polynomial", "polysketch_learned", "polysketch_random")


@dataclass
class Config:
    vocab_size: int
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    rope_base: float = 10000.0
    attention: str = "polysketch_learned"
    degree: int = 4
    scale: float = 0.25        # s (polynomial, polysketch); softmax (either) always uses 1/sqrt(h)
    sketch_size: int = 16      # r
    block_size: int = 64       # b
    local_exact: bool = True
    sketch_seed: int = 0       # the random sketch's Gaussian matrices (polysketch_random)
    init: str = "gpt2"         # "gpt2": matrices N(0, 0.02^2); "scaled": N(0, 1/fan_in) (not in the file)

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    def validate(self):
        assert self.attention in ATTENTION_KINDS, self.attention
        assert self.d_model % self.n_heads == 0
        h = self.head_dim
        assert 16 <= h <= 256 and h % 2 == 0, "the library needs 16 <= h <= 256 (RoPE: h even)"
        assert self.degree == 4, "this trainer implements degree 4 only"
        if self.attention.startswith("polysketch"):
            assert 8 <= self.sketch_size <= 128, "the library accepts r in 8..128"
            assert 16 <= self.block_size <= 1024, "the library accepts b in 16..1024"


# ----------------------------------------------------------------------------------------------
# Building blocks


def layer_norm(x, scale, bias):
    """(x - mean) / sqrt(var + 1e-5) * scale + bias, population variance over the last dim."""
    return F.layer_norm(x, (x.shape[-1],), scale, bias, LN_EPS)


def gelu(x):
    """The tanh approximation x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return F.gelu(x, approximate="tanh")


def rope_tables(n, h, base, dtype, device=None):
    """cos/sin [n, h/2]: theta_c = i * base^(-2c/h) in float64, cos and sin in float64, then rounded."""
    c = torch.arange(h // 2, dtype=torch.float64)
    inv = torch.pow(torch.tensor(float(base), dtype=torch.float64), -2.0 * c / h)
    theta = torch.arange(n, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(theta).to(dtype=dtype, device=device), torch.sin(theta).to(dtype=dtype, device=device)


def apply_rope(x, cos, sin):
    """x [..., n, h], "rotate half" pairing of c and c + h/2."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def pair_indices(r, device=None):
    """The packed self-tensor's pairs a < b, a-major (docs/MATH.md section 3)."""
    ia, ib = torch.triu_indices(r, r, offset=1, device=device)
    return ia, ib


def self_tensor(u):
    """psi(u) = [u_a^2 for every a] ++ [sqrt(2) u_a u_b for a < b] (a-major): r(r+1)/2 features,
    <psi(u), psi(w)> = <u, w>^2."""
    ia, ib = pair_indices(u.shape[-1], u.device)
    return torch.cat([u * u, math.sqrt(2.0) * u[..., ia] * u[..., ib]], dim=-1)


def outer_self_tensor(u):
    """u (x) u flattened (r^2 entries): <u (x) u, w (x) w> = <u, w>^2, as psi's."""
    return (u[..., :, None] * u[..., None, :]).flatten(-2)


class LearnedLevel(nn.Module):
    """FF(y) = gelu(LN(y) @ D1) @ D2, D1: in x 8r, D2: 8r x r, no biases (docs/MATH.md section 4)."""

    def __init__(self, d_in, r):
        super().__init__()
        self.ln_scale = nn.Parameter(torch.ones(d_in))
        self.ln_bias = nn.Parameter(torch.zeros(d_in))
        self.dense1 = nn.Parameter(torch.randn(d_in, 8 * r) / math.sqrt(d_in))
        self.dense2 = nn.Parameter(torch.randn(8 * r, r) / math.sqrt(8 * r))

    def forward(self, y):
        return gelu(layer_norm(y, self.ln_scale, self.ln_bias) @ self.dense1) @ self.dense2


class LearnedBranch(nn.Module):
    """Two levels: h -> 8r -> r, then r -> 8r -> r."""

    def __init__(self, h, r):
        super().__init__()
        self.levels = nn.ModuleList([LearnedLevel(h, r), LearnedLevel(r, r)])

    def forward(self, x):
        return self.levels[1](self.levels[0](x))


def learned_sketch(x, f1, f2, r):
    """S(x) = sqrt(r) tanh(f1(x) * f2(x) / sqrt(r))."""
    sr = math.sqrt(r)
    return sr * torch.tanh(f1(x) * f2(x) / sr)


def random_sketch(x, ga, gb):
    """p = 4, unbiased scaling: S(x) = sqrt(1/r) (x @ Ga) * (x @ Gb)."""
    r = ga.shape[-1]
    return math.sqrt(1.0 / r) * (x @ ga) * (x @ gb)


# ----------------------------------------------------------------------------------------------
# Attention functions on [..., n, h] rows (q already s * LN(q), k already LN(k) where they apply)


def polynomial_causal(qs, kn, v, p=4):
    """Exact causal polynomial attention: w_ij = (qs_i . kn_j)^p for j <= i, O = W V / (1 + W 1)."""
    n = qs.shape[-2]
    w = (qs @ kn.transpose(-1, -2)) ** p
    mask = torch.ones(n, n, dtype=torch.bool, device=qs.device).tril()
    w = w.masked_fill(~mask, 0.0)
    return (w @ v) / (1.0 + w.sum(-1, keepdim=True))


def polysketch_causal(qs, kn, v, sq, sk, block, local_exact, p=4):
    """Causal polysketch by blocks of `block` rows (docs/MATH.md section 6).

    qs = s LN(q), kn = LN(k): [..., n, h] (the exact local part's rows); sq = S(qs), sk = S(kn):
    [..., n, r] (the sketch rows); v: [..., n, dv]. Block states H_l = phi(K_l)^T [V_l | 1], an
    exclusive prefix sum over blocks Z_l = sum_{j<l} H_j, num_i = phi(q_i)^T Z_l + local_i with
    local_i the row of lt(A_l) [V_l | 1], A_l = phi(Q_l) phi(K_l)^T (sketched) or (Q_l K_l^T)^p
    (local exact); O_i = num_i[:dv] / (1 + num_i[dv]). Linear in n.
    """
    n, dv = v.shape[-2], v.shape[-1]
    t = (n + block - 1) // block
    pad = t * block - n
    lead = v.shape[:-2]
    ones = torch.ones(*lead, n, 1, dtype=v.dtype, device=v.device)
    v1 = torch.cat([v, ones], dim=-1)

    def blocks(x):
        # Padding rows come after every real row: they only reach padded rows (causal), and the
        # last block's state is never read (the prefix is exclusive).
        if pad:
            x = F.pad(x, (0, 0, 0, pad))
        return x.reshape(*lead, t, block, x.shape[-1])

    sqb, skb, v1b = blocks(sq), blocks(sk), blocks(v1)
    # phi unpacked (u (x) u, r^2 entries): the same inner products as the packed psi of section 3,
    # <u (x) u, w (x) w> = <u, w>^2 = <psi(u), psi(w)>, without a gather (faster to train on a CPU).
    phiq, phik = outer_self_tensor(sqb), outer_self_tensor(skb)      # [..., t, b, r^2]
    states = phik.transpose(-1, -2) @ v1b                             # [..., t, F, dv+1]
    prefix = torch.cumsum(states, dim=-3)
    prefix = torch.cat([torch.zeros_like(prefix[..., :1, :, :]), prefix[..., :-1, :, :]], dim=-3)
    num = phiq @ prefix                                               # [..., t, b, dv+1]
    if local_exact:
        a = (blocks(qs) @ blocks(kn).transpose(-1, -2)) ** p
    else:
        a = (sqb @ skb.transpose(-1, -2)) ** 2                        # = phi(Q_l) phi(K_l)^T
    mask = torch.ones(block, block, dtype=torch.bool, device=v.device).tril()
    a = a.masked_fill(~mask, 0.0)
    num = num + a @ v1b
    out = num[..., :dv] / (1.0 + num[..., dv:])
    return out.reshape(*lead, t * block, dv)[..., :n, :]


# ----------------------------------------------------------------------------------------------
# The network


def init_std(cfg: Config, fan_in):
    """The initial standard deviation of a projection matrix: GPT-2's 0.02, or 1/sqrt(fan_in)
    ("scaled": q.k / sqrt(h) of order 1 at the start, so softmax attention starts to learn at once;
    the q/k LayerNorm of the other kinds makes them insensitive to it)."""
    return 0.02 if cfg.init == "gpt2" else 1.0 / math.sqrt(fan_in)


class Attention(nn.Module):
    def __init__(self, cfg: Config, layer_index: int):
        super().__init__()
        self.cfg = cfg
        D, h, r = cfg.d_model, cfg.head_dim, cfg.sketch_size
        self.wqkv = nn.Parameter(torch.randn(D, 3 * D) * init_std(cfg, D))
        self.wo = nn.Parameter(torch.randn(D, D) * init_std(cfg, D) / math.sqrt(2 * cfg.n_layers))
        if cfg.attention != "softmax":
            self.ln_scale = nn.Parameter(torch.ones(h))
            self.ln_bias = nn.Parameter(torch.zeros(h))
        if cfg.attention == "polysketch_learned":
            self.f1 = LearnedBranch(h, r)
            self.f2 = LearnedBranch(h, r)
        if cfg.attention == "polysketch_random":
            g = torch.Generator().manual_seed(cfg.sketch_seed * 1000 + layer_index)
            self.register_buffer("g1_0a", torch.randn(h, r, generator=g))
            self.register_buffer("g1_0b", torch.randn(h, r, generator=g))

    def sketch(self, x):
        if self.cfg.attention == "polysketch_learned":
            return learned_sketch(x, self.f1, self.f2, self.cfg.sketch_size)
        return random_sketch(x, self.g1_0a, self.g1_0b)

    def forward(self, x, cos, sin):
        B, n, D = x.shape
        H, h = self.cfg.n_heads, self.cfg.head_dim
        qkv = x @ self.wqkv
        q, k, v = (qkv[..., i * D:(i + 1) * D].reshape(B, n, H, h).transpose(1, 2) for i in range(3))
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        kind = self.cfg.attention
        if kind == "softmax":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif kind == "softmax_qknorm":
            qn = layer_norm(q, self.ln_scale, self.ln_bias)
            kn = layer_norm(k, self.ln_scale, self.ln_bias)
            o = F.scaled_dot_product_attention(qn, kn, v, is_causal=True)
        else:
            qs = self.cfg.scale * layer_norm(q, self.ln_scale, self.ln_bias)
            kn = layer_norm(k, self.ln_scale, self.ln_bias)
            if kind == "polynomial" or (self.cfg.local_exact and n <= self.cfg.block_size):
                # One block in local-exact mode: no prefix, the block's exact weights are all of it
                # (polysketch_causal would give the same; the sketch is not needed).
                o = polynomial_causal(qs, kn, v, self.cfg.degree)
            else:
                o = polysketch_causal(qs, kn, v, self.sketch(qs), self.sketch(kn),
                                      self.cfg.block_size, self.cfg.local_exact, self.cfg.degree)
        o = o.transpose(1, 2).reshape(B, n, D)
        return o @ self.wo


class Layer(nn.Module):
    def __init__(self, cfg: Config, layer_index: int):
        super().__init__()
        D = cfg.d_model
        self.ln1_scale = nn.Parameter(torch.ones(D))
        self.ln1_bias = nn.Parameter(torch.zeros(D))
        self.attn = Attention(cfg, layer_index)
        self.ln2_scale = nn.Parameter(torch.ones(D))
        self.ln2_bias = nn.Parameter(torch.zeros(D))
        self.w1 = nn.Parameter(torch.randn(D, 4 * D) * init_std(cfg, D))
        self.w2 = nn.Parameter(torch.randn(4 * D, D) * init_std(cfg, 4 * D) / math.sqrt(2 * cfg.n_layers))

    def forward(self, x, cos, sin):
        x = x + self.attn(layer_norm(x, self.ln1_scale, self.ln1_bias), cos, sin)
        m = layer_norm(x, self.ln2_scale, self.ln2_bias)
        return x + gelu(m @ self.w1) @ self.w2


class TinyLM(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        D = cfg.d_model
        self.tok_emb = nn.Parameter(torch.randn(cfg.vocab_size, D) * 0.02)
        self.layers = nn.ModuleList([Layer(cfg, l) for l in range(cfg.n_layers)])
        self.lnf_scale = nn.Parameter(torch.ones(D))
        self.lnf_bias = nn.Parameter(torch.zeros(D))
        self._rope = {}

    def rope(self, n, dtype, device):
        key = (n, dtype, device)
        if key not in self._rope:
            self._rope = {key: rope_tables(n, self.cfg.head_dim, self.cfg.rope_base, dtype, device)}
        return self._rope[key]

    def forward(self, tokens):
        """tokens [B, n] (int64) -> logits [B, n, V]."""
        x = self.tok_emb[tokens]
        cos, sin = self.rope(tokens.shape[1], x.dtype, x.device)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return layer_norm(x, self.lnf_scale, self.lnf_bias) @ self.tok_emb.t()

    def weight_decay_groups(self):
        """Matrices decay; LayerNorm scales/biases do not (the random sketch is a buffer)."""
        decay, no_decay = [], []
        for name, p in self.named_parameters():
            (decay if p.dim() >= 2 else no_decay).append(p)
        return decay, no_decay


# ----------------------------------------------------------------------------------------------
# The model file (samples/tinylm/MODEL.md)


def tensor_names(model: TinyLM):
    """{MODEL.md name: tensor} for every tensor the model file holds."""
    cfg = model.cfg
    out = {"tok_emb": model.tok_emb}
    for l, layer in enumerate(model.layers):
        p = f"layers.{l}."
        a = layer.attn
        out[p + "ln1.scale"] = layer.ln1_scale
        out[p + "ln1.bias"] = layer.ln1_bias
        out[p + "attn.wqkv"] = a.wqkv
        out[p + "attn.wo"] = a.wo
        out[p + "ln2.scale"] = layer.ln2_scale
        out[p + "ln2.bias"] = layer.ln2_bias
        out[p + "mlp.w1"] = layer.w1
        out[p + "mlp.w2"] = layer.w2
        if cfg.attention != "softmax":
            out[p + "attn.ln.scale"] = a.ln_scale
            out[p + "attn.ln.bias"] = a.ln_bias
        if cfg.attention == "polysketch_learned":
            for bi, branch in enumerate((a.f1, a.f2)):
                for li, level in enumerate(branch.levels):
                    q = f"{p}attn.f{bi + 1}.{li}."
                    out[q + "ln.scale"] = level.ln_scale
                    out[q + "ln.bias"] = level.ln_bias
                    out[q + "dense1"] = level.dense1
                    out[q + "dense2"] = level.dense2
        if cfg.attention == "polysketch_random":
            out[p + "attn.g1_0a"] = a.g1_0a
            out[p + "attn.g1_0b"] = a.g1_0b
    out["ln_f.scale"] = model.lnf_scale
    out["ln_f.bias"] = model.lnf_bias
    return out


def format_scale(s):
    """The shortest decimal that reads back as the same float32 (what the app parses)."""
    f = torch.tensor(s, dtype=torch.float32).item()
    for digits in range(1, 18):
        text = f"{f:.{digits}g}"
        if torch.tensor(float(text), dtype=torch.float32).item() == f:
            return text
    return repr(f)


def model_metadata(cfg: Config, task: str, train_context: int, task_params: dict):
    h = cfg.head_dim
    md = {
        "format": "polysketch-tinylm",
        "format_version": "1",
        "vocab_size": str(cfg.vocab_size),
        "d_model": str(cfg.d_model),
        "n_layers": str(cfg.n_layers),
        "n_heads": str(cfg.n_heads),
        "rope_base": format_scale(cfg.rope_base) if cfg.rope_base != int(cfg.rope_base) else str(int(cfg.rope_base)),
        "task": task,
        "train_context": str(train_context),
    }
    if cfg.attention == "softmax":
        md["attention"] = "softmax"
        md["scale"] = format_scale(1.0 / math.sqrt(h))
    else:
        md["attention"] = "polynomial" if cfg.attention == "polynomial" else "polysketch"
        md["degree"] = str(cfg.degree)
        md["scale"] = format_scale(cfg.scale)
    if cfg.attention.startswith("polysketch"):
        kind = "learned" if cfg.attention == "polysketch_learned" else "random"
        md["sketch"] = kind
        md["kind"] = kind
        md["sketch_size"] = str(cfg.sketch_size)
        if kind == "random":
            md["scaling"] = "unbiased"
        md["block_size"] = str(cfg.block_size)
        md["local_exact"] = "1" if cfg.local_exact else "0"
    for k, v in task_params.items():
        md["task_" + k] = str(v)
    return md


def has_model_file(attention):
    """Whether MODEL.md (and so the app) describes a model of this attention kind."""
    return attention != "softmax_qknorm"


def save_model(model: TinyLM, path, task, train_context, task_params, extra_metadata=None):
    from safetensors.torch import save_file
    if not has_model_file(model.cfg.attention):
        # A file with attention "softmax" would run in the app without its q/k LayerNorm: wrong
        # logits, silently. Refuse instead.
        raise ValueError(f"{model.cfg.attention}: no tinylm model file format (MODEL.md) for this kind")
    tensors = {k: v.detach().to(torch.float32).contiguous().clone() for k, v in tensor_names(model).items()}
    md = model_metadata(model.cfg, task, train_context, task_params)
    if extra_metadata:
        md.update({k: str(v) for k, v in extra_metadata.items()})
    save_file(tensors, str(path), metadata=md)
    return md


def load_model(path):
    """Reads a tinylm model file back (metadata and tensors) into a TinyLM."""
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        md = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    attention = md["attention"]
    if attention == "polysketch":
        attention = "polysketch_" + md["sketch"]
    cfg = Config(vocab_size=int(md["vocab_size"]), d_model=int(md["d_model"]), n_layers=int(md["n_layers"]),
                 n_heads=int(md["n_heads"]), rope_base=float(md["rope_base"]), attention=attention)
    if attention != "softmax":
        cfg.scale = float(md["scale"])
        cfg.degree = int(md["degree"])
    if attention.startswith("polysketch"):
        cfg.sketch_size = int(md["sketch_size"])
        cfg.block_size = int(md["block_size"])
        cfg.local_exact = md["local_exact"] == "1"
    model = TinyLM(cfg)
    names = tensor_names(model)
    assert set(names) == set(tensors), sorted(set(names) ^ set(tensors))
    with torch.no_grad():
        for k, t in names.items():
            assert tuple(t.shape) == tuple(tensors[k].shape), (k, t.shape, tensors[k].shape)
            t.copy_(tensors[k])
    return model, md


def config_json(cfg: Config):
    return json.dumps(asdict(cfg))
