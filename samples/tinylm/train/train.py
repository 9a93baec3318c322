"""Trains a tinylm model (samples/tinylm/MODEL.md) on one task and writes the model file, its golden
file, the task's evaluation file (synthetic tasks) and a json of the results.

  .venv-train/bin/python samples/tinylm/train/train.py --task bytes --attention polysketch_learned \\
      --steps 2000 --seed 1 --context 256 --name bytes_polysketch

Outputs (in --out-dir, default samples/tinylm/models):
  <name>.safetensors            the model (F32 tensors, metadata per MODEL.md)
  <name>.golden.safetensors     tokens, PyTorch's float32 logits (and eval_correct, synthetic tasks)
  <task>.eval.safetensors       the task's N held-out examples (synthetic tasks; the same file for
                                every model of the task)
  <name>.json                   results: accuracy or held-out bits per byte, training time, command,
                                seed, commit
With --no-files only the json is written (--json PATH: there); sweep.py runs its grid that way.

Synthetic tasks: every --eval-every steps, exact match and per-token accuracy on a validation split
(tasks.VALID_SEED, --valid-count examples); at the end the same on the validation split and on the
--eval-count test examples (tasks.EVAL_SEED). Choices are made on the validation split.

Device: --device auto (the default) trains on CUDA when torch sees a GPU, else on the CPU. The
golden file is always computed on the CPU (the app is compared with it to 1e-4).
"""
import argparse
import json
import math
import os
import platform
import shlex
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402
import tasks as T  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, "..", "models"))
SHORT = {"selective_copy": "selcopy", "assoc_recall": "recall", "bytes": "bytes"}
ATT_SHORT = {"softmax": "softmax", "softmax_qknorm": "softmax_qknorm", "polynomial": "polynomial",
             "polysketch_learned": "polysketch", "polysketch_random": "polysketch_random"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", choices=T.TASKS, required=True)
    p.add_argument("--attention", choices=M.ATTENTION_KINDS, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--context", type=int, default=None,
                   help="bytes: the training window; synthetic tasks: the region length (n is a little longer)")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min-lr-frac", type=float, default=0.1, help="cosine decay down to lr * this")
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--n-heads", type=int, default=2)
    p.add_argument("--scale", type=float, default=0.25, help="s (polynomial, polysketch), a fixed constant")
    p.add_argument("--sketch-size", type=int, default=16)
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--no-local-exact", action="store_true", help="sketched local weights instead of exact")
    p.add_argument("--init", choices=("gpt2", "scaled"), default="gpt2",
                   help="projection matrices N(0, 0.02^2) (gpt2) or N(0, 1/fan_in) (scaled)")
    p.add_argument("--sketch-seed", type=int, default=0, help="polysketch_random: the Gaussian matrices")
    # task parameters
    p.add_argument("--copy", type=int, default=16, help="selective_copy: tokens to copy")
    p.add_argument("--colors", type=int, default=16, help="selective_copy: colors")
    p.add_argument("--distinct", action="store_true", help="selective_copy: the copied colors are all distinct")
    p.add_argument("--queries", type=int, default=32, help="assoc_recall: queries in the region")
    p.add_argument("--keys", type=int, default=8, help="assoc_recall: keys")
    p.add_argument("--values", type=int, default=8, help="assoc_recall: values")
    p.add_argument("--curriculum-start", type=int, default=0,
                   help="synthetic tasks: train on regions growing from this length to --context over the "
                        "first --curriculum-frac of the steps (0: none); evaluation is always at --context")
    p.add_argument("--curriculum-frac", type=float, default=0.5)
    p.add_argument("--kjv", default=None, help="bytes: the text file (default: `bible -f gen1:1-rev22:21`)")
    # outputs and logging
    p.add_argument("--name", default=None, help="output base name (default <task>_<attention>)")
    p.add_argument("--out-dir", default=DEFAULT_OUT)
    p.add_argument("--eval-count", type=int, default=1000, help="synthetic tasks: held-out test examples")
    p.add_argument("--valid-count", type=int, default=500,
                   help="synthetic tasks: validation examples (their own stream), evaluated every --eval-every steps")
    p.add_argument("--no-files", action="store_true",
                   help="write only the results json (no model, golden or evaluation file)")
    p.add_argument("--json", default=None, help="the results json's path (default <out-dir>/<name>.json)")
    p.add_argument("--device", default="auto", help="auto (CUDA when present, else CPU), cpu, cuda, cuda:N")
    p.add_argument("--log-every", type=int, default=25)
    p.add_argument("--eval-every", type=int, default=250)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--time-limit", type=float, default=0, help="minutes; stop training early (0: none)")
    return p.parse_args(argv)


def build_task(a, region=None):
    if a.task == "selective_copy":
        return T.SelectiveCopy(region=region or a.context or 512, copy=a.copy, colors=a.colors,
                               distinct=a.distinct)
    if a.task == "assoc_recall":
        # a shorter region (curriculum) keeps the density of queries
        return T.AssocRecall(region=region or a.context or 512, keys=a.keys, values=a.values,
                             queries=max(1, a.queries * (region or a.context or 512) // (a.context or 512)))
    return T.Bytes(context=a.context or 512, text=T.kjv_text(a.kjv))


def curriculum_region(a, task, step):
    """The training region length at `step`: from --curriculum-start up to the task's, linearly over the
    first --curriculum-frac of the steps, in multiples of 32."""
    if not a.curriculum_start or a.task == "bytes":
        return task.region
    end = a.curriculum_frac * a.steps
    if step >= end:
        return task.region
    length = a.curriculum_start + (task.region - a.curriculum_start) * step / end
    return max(a.curriculum_start, min(task.region, int(length) // 32 * 32))


def train_batch(task, rng, count, device):
    """(tokens, mask or None): the task's training examples and which tokens are trained on."""
    if hasattr(task, "train_batch"):
        x, mask = task.train_batch(rng, count)
        return torch.from_numpy(x).to(device), torch.from_numpy(mask).to(device)
    return torch.from_numpy(task.batch(rng, count)).to(device), None


def loss_fn(net, x, task, mask=None):
    """Cross-entropy: bytes on every next byte; synthetic tasks on the answer positions, or on the
    tokens `mask` marks (mask[:, i]: token i, predicted at i - 1)."""
    if task.name == "bytes":
        logits = net(x[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
    if mask is not None:
        logits = net(x)[:, :-1]
        m = mask[:, 1:]
        return F.cross_entropy(logits[m], x[:, 1:][m])
    logits = net(x)[:, task.answer_start - 1:-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, task.answer_start:].reshape(-1))


@torch.no_grad()
def answer_hits(net, task, examples, batch=50):
    """[examples, answer tokens] (bool): the argmax of the logits at i - 1 equals the token at i."""
    device = next(net.parameters()).device
    hits = []
    for s in range(0, len(examples), batch):
        x = torch.from_numpy(examples[s:s + batch]).to(device)
        pred = net(x)[:, task.answer_start - 1:-1].argmax(-1)
        hits.append((pred == x[:, task.answer_start:]).cpu())
    return torch.cat(hits).numpy()


def exact_match(net, task, examples, batch=50):
    """Per example: argmax of the logits at i - 1 equals the token at i for every answer position i."""
    return answer_hits(net, task, examples, batch).all(-1).astype(np.uint8)


def accuracy(net, task, examples):
    """(exact match, per-token accuracy) over the answer positions, and the per-example result."""
    hits = answer_hits(net, task, examples)
    correct = hits.all(-1).astype(np.uint8)
    return float(correct.mean()), float(hits.mean()), correct


@torch.no_grad()
def bits_per_byte(net, task, limit=None, batch=16):
    wins = task.held_out_windows(limit)
    device = next(net.parameters()).device
    total_nats, total = 0.0, 0
    full = [w for w in wins if len(w) == task.context]
    rest = [w for w in wins if len(w) != task.context]
    groups = [np.stack(full[i:i + batch]) for i in range(0, len(full), batch)] + [w[None] for w in rest]
    for g in groups:
        x = torch.from_numpy(g).to(device)
        logits = net(x[:, :-1])
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum")
        total_nats += nll.item()
        total += x[:, 1:].numel()
    return total_nats / total / math.log(2), total


def source_commit():
    """The commit of the tree that trains ("<hash>", or "<hash>+dirty" when the training code, train.py,
    model.py or tasks.py, differs from it); outside a git checkout (a copy of the tree on a GPU
    machine) PSK_SOURCE_COMMIT when set, else None."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--name-only", "HEAD", "--", "train.py", "model.py", "tasks.py"], cwd=HERE,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return os.environ.get("PSK_SOURCE_COMMIT") or None
    return head + ("+dirty" if dirty else "")


def pick_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    device = pick_device(a.device)
    commit = source_commit()  # at the start: the code that trains, whatever is committed meanwhile
    if not a.no_files and not M.has_model_file(a.attention):
        raise SystemExit(f"--attention {a.attention} has no model file format (MODEL.md): pass --no-files")
    args = list(argv or sys.argv[1:])
    for where in ("--out-dir", "--json"):  # where the files go does not change them
        if where in args:
            i = args.index(where)
            del args[i:i + 2]
    command = "samples/tinylm/train/train.py " + " ".join(shlex.quote(x) for x in args)
    task = build_task(a)
    name = a.name or f"{SHORT[a.task]}_{ATT_SHORT[a.attention]}"
    os.makedirs(a.out_dir, exist_ok=True)

    torch.manual_seed(a.seed)
    cfg = M.Config(vocab_size=task.vocab_size, d_model=a.d_model, n_layers=a.n_layers, n_heads=a.n_heads,
                   attention=a.attention, scale=a.scale, sketch_size=a.sketch_size, block_size=a.block_size,
                   local_exact=not a.no_local_exact, sketch_seed=a.sketch_seed, init=a.init)
    net = M.TinyLM(cfg).to(device)
    n_params = sum(p.numel() for p in net.parameters())
    decay, no_decay = net.weight_decay_groups()
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))

    def lr_at(step):
        if step < a.warmup:
            return a.lr * (step + 1) / a.warmup
        t = (step - a.warmup) / max(1, a.steps - a.warmup)
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))

    rng = np.random.default_rng(a.seed)
    synthetic = a.task != "bytes"
    if synthetic:
        eval_x = T.eval_examples(task, a.eval_count)
        valid_x = T.valid_examples(task, a.valid_count)
    print(f"{name}: {a.task} n={task.n} vocab={task.vocab_size} {a.attention} D={a.d_model} L={a.n_layers} "
          f"H={a.n_heads} h={cfg.head_dim} r={a.sketch_size} b={a.block_size} local_exact={int(cfg.local_exact)} "
          f"s={a.scale} init={a.init} params={n_params} steps={a.steps} batch={a.batch} lr={a.lr} seed={a.seed} "
          f"device={device}", flush=True)

    log = []
    curriculum_tasks = {}
    t0 = time.time()
    train_time = 0.0
    step = 0
    ema = None
    for step in range(a.steps):
        ts = time.time()
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        train_task = task
        if synthetic and a.curriculum_start:
            region = curriculum_region(a, task, step)
            if region not in curriculum_tasks:
                curriculum_tasks[region] = build_task(a, region)
            train_task = curriculum_tasks[region]
        x, mask = train_batch(train_task, rng, a.batch, device)
        net.train()
        loss = loss_fn(net, x, train_task, mask)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        train_time += time.time() - ts
        ema = loss.item() if ema is None else 0.95 * ema + 0.05 * loss.item()
        entry = None
        if (step + 1) % a.log_every == 0 or step == 0:
            entry = {"step": step + 1, "loss": round(loss.item(), 5), "loss_ema": round(ema, 5),
                     "lr": lr_at(step), "train_s": round(train_time, 1)}
            if train_task is not task:
                entry["region"] = train_task.region
        if a.eval_every and (step + 1) % a.eval_every == 0 and step + 1 < a.steps:
            net.eval()
            entry = entry or {"step": step + 1, "loss": round(loss.item(), 5), "train_s": round(train_time, 1)}
            if synthetic:
                entry["valid_exact"], entry["valid_token"], _ = accuracy(net, task, valid_x)
            else:
                entry["held_out_bpb_20win"] = round(bits_per_byte(net, task, limit=20)[0], 4)
        if entry:
            log.append(entry)
            print(json.dumps(entry), flush=True)
        if a.time_limit and time.time() - t0 > a.time_limit * 60:
            print(f"time limit reached after {step + 1} steps", flush=True)
            break
    steps_done = step + 1
    net.eval()

    # Results
    result = {"name": name, "task": a.task, "attention": a.attention, "seed": a.seed, "steps": steps_done,
              "batch": a.batch, "lr": a.lr, "params": n_params, "train_seconds": round(train_time, 1),
              "command": command, "commit": commit, "threads": a.threads, "torch": torch.__version__,
              "device": str(device), "cpu": platform.processor() or platform.machine(),
              "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
              "config": json.loads(M.config_json(cfg)),
              "task_params": task.params(), "seq_len": task.n}
    te = time.time()
    if synthetic:
        result["valid_examples"] = len(valid_x)
        result["valid_exact"], result["valid_token"], _ = accuracy(net, task, valid_x)
        if not a.no_files and device.type != "cpu":
            net = net.cpu()  # the golden file's eval_correct as the CPU computes it, like its logits
        result["exact_match"], result["token_accuracy"], correct = accuracy(net, task, eval_x)
        result["eval_examples"] = int(len(correct))
        print(f"validation ({len(valid_x)} examples): exact match {result['valid_exact']:.4f}, per token "
              f"{result['valid_token']:.4f}; test ({len(correct)} held-out examples): exact match "
              f"{result['exact_match']:.4f}, per token {result['token_accuracy']:.4f}", flush=True)
    else:
        bpb, count = bits_per_byte(net, task)
        result["held_out_bits_per_byte"] = round(bpb, 5)
        result["held_out_bytes_scored"] = count
        print(f"held-out bits per byte: {bpb:.4f} over {count} bytes", flush=True)
    result["eval_seconds"] = round(time.time() - te, 1)
    result["log"] = log
    json_path = a.json or os.path.join(a.out_dir, name + ".json")
    if a.no_files:
        os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {json_path}; train {train_time:.0f} s", flush=True)
        return result
    net = net.cpu()

    # Files
    from safetensors.numpy import save_file
    model_path = os.path.join(a.out_dir, name + ".safetensors")
    train_context = task.n if synthetic else task.context
    md = M.save_model(net, model_path, a.task, train_context, task.params())
    if synthetic:
        prompt = eval_x[0]
    else:
        prompt = task.held[:200]
    with torch.no_grad():
        logits = net(torch.from_numpy(np.asarray(prompt, dtype=np.int64))[None])[0].float().numpy()
    golden = {"tokens": np.ascontiguousarray(prompt, dtype=np.int32),
              "logits": np.ascontiguousarray(logits, dtype=np.float32)}
    golden_md = {"model": name + ".safetensors"}
    if synthetic:
        golden["eval_correct"] = np.ascontiguousarray(correct, dtype=np.uint8)
        golden_md["eval_file"] = f"{a.task}.eval.safetensors"
        golden_md["exact_match"] = f"{correct.mean():.4f}"
        save_file({"inputs": np.ascontiguousarray(eval_x, dtype=np.uint8),
                   "answer_start": np.full(len(eval_x), task.answer_start, dtype=np.int32)},
                  os.path.join(a.out_dir, f"{a.task}.eval.safetensors"),
                  metadata={"task": a.task, "seed": str(T.EVAL_SEED),
                            **{"task_" + k: str(v) for k, v in task.params().items()}})
    save_file(golden, os.path.join(a.out_dir, name + ".golden.safetensors"), metadata=golden_md)
    result["metadata"] = md
    result["model_bytes"] = os.path.getsize(model_path)
    with open(json_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {model_path} ({result['model_bytes']} bytes), golden, json; train {train_time:.0f} s", flush=True)


if __name__ == "__main__":
    main()
