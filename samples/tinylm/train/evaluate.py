"""Exact match and per-token accuracy of tinylm model files on a synthetic task's evaluation file
(MODEL.md: an example is correct when every answer token is the argmax at the position before it;
per token counts each answer token on its own), with model.py in float32.

  .venv-train/bin/python samples/tinylm/train/evaluate.py samples/tinylm/models/selcopy_softmax.safetensors \\
      --data samples/tinylm/models/selective_copy.eval.safetensors [--json OUT.json]

Per-token accuracy is what exact match hides on multi-token answers: 16 answer tokens each right with
probability 0.88 make an exact match of 0.88^16 = 13%.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.numpy import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model as M  # noqa: E402


@torch.no_grad()
def answer_hits(net, inputs, answer_start, batch=25):
    """[examples, answer tokens] (bool) for examples that share one answer_start."""
    hits = []
    for s in range(0, len(inputs), batch):
        x = torch.from_numpy(inputs[s:s + batch].astype(np.int64))
        pred = net(x)[:, answer_start - 1:-1].argmax(-1)
        hits.append(pred == x[:, answer_start:])
    return torch.cat(hits).numpy()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+")
    p.add_argument("--data", required=True, help="the task's <task>.eval.safetensors")
    p.add_argument("--limit", type=int, default=0, help="the first N examples (0: all)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--json", default=None, help="write the results here")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    data = load_file(a.data)
    inputs, starts = data["inputs"], data["answer_start"]
    if a.limit:
        inputs, starts = inputs[:a.limit], starts[:a.limit]
    assert (starts == starts[0]).all(), "examples with different answer positions"
    results = []
    for path in a.models:
        net, md = M.load_model(path)
        net.eval()
        hits = answer_hits(net, inputs, int(starts[0]))
        r = {"model": os.path.basename(path), "data": os.path.basename(a.data), "examples": int(len(hits)),
             "answer_tokens": int(hits.shape[1]), "exact_match": float(hits.all(-1).mean()),
             "token_accuracy": float(hits.mean())}
        results.append(r)
        print(f"{r['model']}: exact match {r['exact_match']:.4f}, per token {r['token_accuracy']:.4f} "
              f"({r['examples']} examples, {r['answer_tokens']} answer tokens each)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
