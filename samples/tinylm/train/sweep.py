"""The fair attention comparison as one grid: every model trained the same way, a learning-rate sweep
chosen on the validation split, then several seeds of each model's best learning rate, reported on
the test examples with mean and range, per-token accuracy beside exact match, accuracy against steps.

  .venv-train/bin/python samples/tinylm/train/sweep.py                  # the full grid (for a GPU)
  .venv-train/bin/python samples/tinylm/train/sweep.py --preset cpu     # the reduced grid run on a CPU

The models (--models, each ATTENTION[:INIT], init "scaled" unless given):
  softmax_qknorm      softmax on the same q/k LayerNorm as polysketch (after RoPE, scale 1/sqrt(h))
  polysketch_learned  polysketch, learned sketch r = 16, block 64, local exact, s = 0.25, q/k LayerNorm
  softmax             bare softmax (no q/k LayerNorm), for reference
All with the scaled init (N(0, 1/fan_in) matrices: softmax's scores of order 1 from step 0).

Phases, per task and model:
  sweep   every --lrs value with the first seed; the best learning rate is the one with the highest
          final validation exact match, ties broken by validation per-token accuracy, then by the mean
          validation exact match over the run's evaluations (the one that got there sooner)
  final   the best learning rate with every --seeds value (the first seed's run is the sweep's own)
The test examples (train.py's --eval-count, the task's held-out stream) are read only for the report.

Writes into --out (default samples/tinylm/train/results/<preset>): runs/<run>.json (train.py's
results json: command, commit, seed, loss and validation log) and runs/<run>.log (its output);
summary.csv (one row per run) and summary.md (the tables). A run whose json exists is not run again
(--force reruns), so an interrupted grid resumes; --report-only rebuilds the summary from the jsons.
--jobs N runs N at once (each model's seeds start once its sweep is complete); --deadline-s S stops
the runs still going after S seconds (they leave no json, so the next call starts them again).
"""
import argparse
import csv
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN = os.path.join(HERE, "train.py")

# Each preset: the grid, and per task the train.py arguments every run of it shares.
PRESETS = {
    # The grid the comparison needs: the README's models and tasks (context 512, D = 128, 2 layers,
    # 4 heads, batch 16, the curriculum over the first half), longer than the committed runs.
    "full": {
        "tasks": ["assoc_recall", "selective_copy"],
        "models": ["softmax_qknorm", "polysketch_learned", "softmax"],
        "lrs": [5e-4, 1e-3, 2e-3, 4e-3],
        "seeds": [1, 2, 3],
        "steps": 3000,
        "eval_every": 100,
        "task_args": {
            "assoc_recall": ["--context", "512", "--keys", "8", "--values", "8", "--curriculum-start", "32",
                             "--curriculum-frac", "0.5"],
            "selective_copy": ["--context", "512", "--curriculum-start", "64", "--curriculum-frac", "0.5"],
        },
        "model_args": ["--d-model", "128", "--n-heads", "4", "--n-layers", "2", "--batch", "16",
                       "--valid-count", "500", "--eval-count", "1000"],
    },
    # What fits in about 100 minutes of one CPU core shared with other work: region 256 instead of 512
    # (recall n = 259, copying n = 273), a model of D = 64 with 2 heads of 32 (instead of D = 128,
    # 4 heads), 500 steps, 3 learning rates, 3 seeds, 250 validation examples. Recall is solved in
    # that budget; copying is not (its per-token accuracy is what tells the models apart).
    "cpu": {
        "tasks": ["assoc_recall", "selective_copy"],
        "models": ["softmax_qknorm", "polysketch_learned", "softmax"],
        "lrs": [1e-3, 3e-3, 1e-2],
        "seeds": [1, 2, 3],
        "steps": 500,
        "eval_every": 50,
        "task_args": {
            "assoc_recall": ["--context", "256", "--keys", "8", "--values", "8", "--curriculum-start", "32",
                             "--curriculum-frac", "0.5"],
            "selective_copy": ["--context", "256", "--curriculum-start", "64", "--curriculum-frac", "0.5"],
        },
        "model_args": ["--d-model", "64", "--n-heads", "2", "--n-layers", "2", "--batch", "16",
                       "--valid-count", "250", "--eval-count", "1000"],
    },
}

SHORT_TASK = {"assoc_recall": "recall", "selective_copy": "selcopy"}
THRESHOLD = 0.95  # "solved": the steps and training seconds until the validation exact match reaches it


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="full")
    p.add_argument("--tasks", nargs="+", help="override the preset's tasks")
    p.add_argument("--models", nargs="+", help="override the preset's models (ATTENTION[:INIT])")
    p.add_argument("--lrs", nargs="+", type=float, help="override the preset's learning rates")
    p.add_argument("--seeds", nargs="+", type=int, help="override the preset's seeds (the first one sweeps)")
    p.add_argument("--steps", type=int, help="override the preset's steps")
    p.add_argument("--eval-every", type=int, help="override the preset's validation interval")
    p.add_argument("--device", default="auto", help="train.py --device (auto: CUDA when present, else CPU)")
    p.add_argument("--threads", type=int, default=1, help="train.py --threads (CPU)")
    p.add_argument("--out", help="output folder (default samples/tinylm/train/results/<preset>)")
    p.add_argument("--phase", choices=("sweep", "final", "all"), default="all")
    p.add_argument("--force", action="store_true", help="rerun runs whose json exists")
    p.add_argument("--report-only", action="store_true", help="only rebuild summary.csv and summary.md")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (a GPU runs several small models side by side)")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="seconds from the start: runs still going then are stopped and leave no json (0: none)")
    p.add_argument("--dry-run", action="store_true", help="print the commands of the runs not done yet, run nothing (the seeds' runs "
                        "appear once their model's sweep is done: they need its best rate)")
    return p.parse_args(argv)


def grid(a):
    g = dict(PRESETS[a.preset])
    for key in ("tasks", "models", "lrs", "seeds", "steps", "eval_every"):
        if getattr(a, key) is not None:
            g[key] = getattr(a, key)
    return g


def model_spec(spec):
    attention, _, init = spec.partition(":")
    return attention, init or "scaled"


def model_label(spec):
    attention, init = model_spec(spec)
    return attention if init == "scaled" else f"{attention}_{init}"


def run_name(task, spec, lr, seed):
    return f"{SHORT_TASK[task]}_{model_label(spec)}_lr{lr:g}_s{seed}"


def train_args(g, task, spec, lr, seed, device, threads):
    attention, init = model_spec(spec)
    return (["--task", task, "--attention", attention, "--init", init, "--lr", f"{lr:g}", "--seed", str(seed),
             "--steps", str(g["steps"]), "--eval-every", str(g["eval_every"]), "--device", device,
             "--threads", str(threads), "--no-files", "--name", run_name(task, spec, lr, seed)]
            + g["task_args"][task] + g["model_args"])


def start_one(a, g, out, task, spec, lr, seed):
    """Starts one run (train.py in a process of its own); returns (name, path, process, start) or None."""
    name = run_name(task, spec, lr, seed)
    path = os.path.join(out, "runs", name + ".json")
    cmd = [sys.executable, TRAIN] + train_args(g, task, spec, lr, seed, a.device, a.threads) + ["--json", path]
    print(("would run: " if a.dry_run else "run: ") + " ".join(cmd[1:]), flush=True)
    if a.dry_run:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    log = open(os.path.join(out, "runs", name + ".log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return name, path, proc, time.time()


def finish_one(out, name, path, rc, t0):
    if rc != 0:
        raise SystemExit(f"{name}: train.py exited {rc}; see {os.path.join(out, 'runs', name + '.log')}")
    with open(path) as f:
        result = json.load(f)
    print(f"  {name}: validation exact {result['valid_exact']:.3f}, test exact {result['exact_match']:.3f} "
          f"({time.time() - t0:.0f} s)", flush=True)
    return result


def curve(result):
    """[(step, validation exact, validation per token, training seconds)], the final evaluation last."""
    points = [(e["step"], e["valid_exact"], e["valid_token"], e["train_s"]) for e in result["log"]
              if "valid_exact" in e]
    points.append((result["steps"], result["valid_exact"], result["valid_token"], result["train_seconds"]))
    return points


def reached(result, threshold=THRESHOLD):
    """(step, training seconds) of the first evaluation at or above threshold, or (None, None)."""
    for step, exact, _, seconds in curve(result):
        if exact >= threshold:
            return step, seconds
    return None, None


def plateaued(result, width=3, tolerance=0.01):
    """The last `width` validation exact matches lie within `tolerance` of each other, and so do the
    per-token accuracies (an exact match flat at 0 while the tokens still improve is no plateau)."""
    last = curve(result)[-width:]
    return len(last) == width and all(max(p[i] for p in last) - min(p[i] for p in last) <= tolerance
                                      for i in (1, 2))


def sweep_key(result):
    """Higher is better: final validation exact, then per token, then the mean over the curve."""
    points = curve(result)
    return (result["valid_exact"], result["valid_token"], sum(p[1] for p in points) / len(points))


def stats(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    mean = sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.3f}"
    return f"{mean:.3f} [{min(values):.3f}, {max(values):.3f}]"


def pct(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    mean = 100 * sum(values) / len(values)
    if len(values) == 1:
        return f"{mean:.1f}%"
    return f"{mean:.1f}% [{100 * min(values):.1f}, {100 * max(values):.1f}]"


def count_stats(values, unit=""):
    done = [v for v in values if v is not None]
    if not done:
        return "never"
    text = f"{sum(done) / len(done):.0f}{unit}"
    if len(done) > 1:
        text += f" [{min(done):.0f}, {max(done):.0f}]"
    if len(done) < len(values):
        text += f" ({len(values) - len(done)} of {len(values)} never)"
    return text


def report(g, out, results, best):
    """summary.csv (every run) and summary.md (sweep, final and curve tables)."""
    rows = []
    for (task, spec, lr, seed), r in sorted(results.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3])):
        step95, sec95 = reached(r)
        rows.append({"task": task, "model": model_label(spec), "lr": f"{lr:g}", "seed": seed,
                     "best_lr": int(best.get((task, spec)) == lr), "steps": r["steps"],
                     "train_s": r["train_seconds"], "valid_exact": r["valid_exact"], "valid_token": r["valid_token"],
                     "test_exact": r["exact_match"], "test_token": r["token_accuracy"],
                     "steps_to_valid95": step95, "train_s_to_valid95": sec95, "plateau": int(plateaued(r)),
                     "device": r.get("device"), "commit": r.get("commit"), "run": run_name(task, spec, lr, seed)})
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["run"])
        w.writeheader()
        w.writerows(rows)

    first_seed = g["seeds"][0]
    md = [f"# Fair comparison: {', '.join(g['tasks'])}", "",
          f"{g['steps']} steps; validation every {g['eval_every']}; learning rates {', '.join(f'{x:g}' for x in g['lrs'])} "
          f"(seed {first_seed}); seeds {', '.join(map(str, g['seeds']))} at each model's best learning rate.",
          "Shared train.py arguments per task: "
          + "; ".join(f"{t}: `{' '.join(g['task_args'][t] + g['model_args'])}`" for t in g["tasks"]), ""]
    for task in g["tasks"]:
        md += [f"## {task}", "", "Learning-rate sweep (validation, seed %d): exact match / per-token accuracy" % first_seed, "",
               "| model | " + " | ".join(f"lr {x:g}" for x in g["lrs"]) + " | best |",
               "|---|" + "---|" * (len(g["lrs"]) + 1)]
        for spec in g["models"]:
            cells = []
            for lr in g["lrs"]:
                r = results.get((task, spec, lr, first_seed))
                cells.append(f"{100 * r['valid_exact']:.1f}% / {100 * r['valid_token']:.1f}%" if r else "-")
            b = best.get((task, spec))
            md.append(f"| {model_label(spec)} | " + " | ".join(cells) + (f" | {b:g} |" if b else " | - |"))
        md += ["", f"Best learning rate, {len(g['seeds'])} seeds: test mean [min, max] over seeds", "",
               "| model | lr | test exact match | test per-token | validation exact match | steps to 95% (validation) "
               "| training s to 95% | training s (all steps) | plateaued |",
               "|---|---|---|---|---|---|---|---|---|"]
        for spec in g["models"]:
            b = best.get((task, spec))
            rs = [results[(task, spec, b, s)] for s in g["seeds"] if (task, spec, b, s) in results]
            if not rs:
                continue
            reach = [reached(r) for r in rs]
            md.append(f"| {model_label(spec)} | {b:g} | {pct([r['exact_match'] for r in rs])} | "
                      f"{pct([r['token_accuracy'] for r in rs])} | {pct([r['valid_exact'] for r in rs])} | "
                      f"{count_stats([x[0] for x in reach])} | {count_stats([x[1] for x in reach], ' s')} | "
                      f"{count_stats([r['train_seconds'] for r in rs], ' s')} | "
                      f"{sum(plateaued(r) for r in rs)} of {len(rs)} |")
        finals = [results[k] for k in ((task, spec, best.get((task, spec)), s) for spec in g["models"]
                                       for s in g["seeds"]) if k in results]
        steps = sorted({p[0] for r in finals for p in curve(r)})
        for what, index in (("exact match", 1), ("per-token accuracy", 2)):
            md += ["", f"Validation {what} (%) against steps (best learning rate, mean over seeds)", "",
                   "| model | " + " | ".join(str(s) for s in steps) + " |", "|---|" + "---|" * len(steps)]
            for spec in g["models"]:
                b = best.get((task, spec))
                by_step = {}
                for s in g["seeds"]:
                    r = results.get((task, spec, b, s))
                    for point in curve(r) if r else []:
                        by_step.setdefault(point[0], []).append(point[index])
                md.append(f"| {model_label(spec)} | " + " | ".join(
                    f"{100 * sum(by_step[s]) / len(by_step[s]):.0f}" if s in by_step else "-" for s in steps) + " |")
        md.append("")
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md))
    return "\n".join(md)


def main(argv=None):
    a = parse_args(argv)
    g = grid(a)
    out = a.out or os.path.join(HERE, "results", a.preset)
    os.makedirs(out, exist_ok=True)
    results, best = {}, {}

    def load_existing():
        for task in g["tasks"]:
            for spec in g["models"]:
                for lr in g["lrs"]:
                    for seed in g["seeds"]:
                        path = os.path.join(out, "runs", run_name(task, spec, lr, seed) + ".json")
                        if os.path.exists(path):
                            with open(path) as f:
                                results[(task, spec, lr, seed)] = json.load(f)

    load_existing()  # runs done before (resume; --phase final; --report-only)
    start = time.time()
    running = {}  # key -> (name, path, process, start)
    stopped = []

    def pending():
        """The runs that can start now, in grid order: each model's sweep, then (once its sweep is
        complete) its seeds at the best learning rate."""
        ready = []
        for task in g["tasks"]:
            for spec in g["models"]:
                sweep = [(task, spec, lr, g["seeds"][0]) for lr in g["lrs"]]
                if a.phase in ("sweep", "all"):
                    ready += [k for k in sweep if k not in results]
                swept = [(sweep_key(results[k]), -k[2], k[2]) for k in sweep if k in results]
                if len(swept) < len(g["lrs"]):
                    continue  # no choice from an incomplete sweep
                best[(task, spec)] = max(swept)[2]
                if a.phase in ("final", "all"):
                    ready += [k for k in ((task, spec, best[(task, spec)], seed) for seed in g["seeds"][1:])
                             if k not in results]
        return [k for k in ready if k not in running]

    if a.report_only:
        pending()  # the best learning rates
    elif a.dry_run:
        for key in pending():
            start_one(a, g, out, *key)
    else:
        while True:
            if a.deadline_s and time.time() - start > a.deadline_s:
                for key, (name, path, proc, _) in running.items():
                    proc.terminate()
                    proc.wait()
                    if os.path.exists(path):
                        os.remove(path)
                    stopped.append(name)
                running.clear()
                break
            for key, (name, path, proc, t0) in list(running.items()):
                if proc.poll() is not None:
                    del running[key]
                    results[key] = finish_one(out, name, path, proc.returncode, t0)
            startable = pending()
            while startable and len(running) < max(1, a.jobs):
                key = startable.pop(0)
                running[key] = start_one(a, g, out, *key)
            if not running:
                break
            time.sleep(0.5)
        if stopped:
            print(f"stopped at the {a.deadline_s:g} s deadline (no json kept): {', '.join(stopped)}", flush=True)
    if not a.dry_run and results:
        print(report(g, out, results, best))


if __name__ == "__main__":
    main()
