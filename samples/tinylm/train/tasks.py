"""The tinylm tasks: deterministic data generators (numpy, seeded).

selective_copy  (the selective copying task of Gu & Dao's Mamba paper, as in PolySketchFormer's
    appendix): a region of `region` tokens, all noise (token 0) except `copy` colored tokens
    (1 .. colors, repeats allowed) at random positions; then a separator (colors + 1); then the
    colored tokens in order. n = region + 1 + copy; the answer is the last `copy` tokens.

assoc_recall    (multi-query associative recall, after Zoology's MQAR): a region of `region`
    tokens, noise (0) except `pairs` key-value pairs "key value" (keys 1 .. keys, distinct within an
    example; values keys+1 .. keys+values, repeats allowed) at random non-overlapping places;
    then a separator, `queries` distinct keys among the pairs' keys, a separator, and the values of
    those keys in the same order. n = region + 2 + 2 * queries; the answer is the last `queries`
    tokens.

bytes           byte-level language model on the King James Bible text of the Debian package
    bible-kjv-text (printed by its reader, `bible -f gen1:1-rev22:21`, one verse per line): the
    first 95% of the bytes train, the last 5% are held out.

Every example of the synthetic tasks has the same length n and its answer at positions
answer_start .. n-1 (samples/tinylm/MODEL.md's evaluation files).
"""
import os
import subprocess

import numpy as np

TASKS = ("selective_copy", "assoc_recall", "bytes")
EVAL_SEED = 20240601  # the held-out examples: one stream, distinct from every training stream


class SelectiveCopy:
    name = "selective_copy"

    def __init__(self, region=512, copy=16, colors=16):
        assert copy <= region
        self.region, self.copy, self.colors = region, copy, colors
        self.sep = colors + 1
        self.vocab_size = colors + 2
        self.n = region + 1 + copy
        self.answer_start = region + 1

    def params(self):
        return {"region": self.region, "copy": self.copy, "colors": self.colors,
                "noise_token": 0, "color_tokens": f"1..{self.colors}", "separator_token": self.sep,
                "answer_start": self.answer_start, "seq_len": self.n}

    def batch(self, rng, count):
        x = np.zeros((count, self.n), dtype=np.int64)
        for e in range(count):
            pos = np.sort(rng.choice(self.region, size=self.copy, replace=False))
            col = rng.integers(1, self.colors + 1, size=self.copy)
            x[e, pos] = col
            x[e, self.region] = self.sep
            x[e, self.answer_start:] = col
        return x


class AssocRecall:
    name = "assoc_recall"

    def __init__(self, region=512, pairs=32, queries=4, keys=64, values=64):
        assert pairs <= keys and queries <= pairs and 2 * pairs <= region
        self.region, self.pairs, self.queries, self.keys, self.values = region, pairs, queries, keys, values
        self.sep = keys + values + 1
        self.vocab_size = keys + values + 2
        self.n = region + 2 + 2 * queries
        self.answer_start = region + 2 + queries

    def params(self):
        return {"region": self.region, "pairs": self.pairs, "queries": self.queries, "keys": self.keys,
                "values": self.values, "noise_token": 0, "key_tokens": f"1..{self.keys}",
                "value_tokens": f"{self.keys + 1}..{self.keys + self.values}", "separator_token": self.sep,
                "answer_start": self.answer_start, "seq_len": self.n}

    def batch(self, rng, count):
        x = np.zeros((count, self.n), dtype=np.int64)
        free = self.region - 2 * self.pairs  # noise tokens to spread between the pairs
        for e in range(count):
            # Places: choose where the pairs go among (pairs + free) items, pairs being 2 wide.
            slots = np.sort(rng.choice(self.pairs + free, size=self.pairs, replace=False))
            starts = slots + np.arange(self.pairs)  # each earlier pair shifts later ones by 1
            keys = rng.choice(self.keys, size=self.pairs, replace=False) + 1
            vals = rng.integers(self.keys + 1, self.keys + self.values + 1, size=self.pairs)
            x[e, starts] = keys
            x[e, starts + 1] = vals
            pick = rng.choice(self.pairs, size=self.queries, replace=False)
            x[e, self.region] = self.sep
            x[e, self.region + 1:self.region + 1 + self.queries] = keys[pick]
            x[e, self.region + 1 + self.queries] = self.sep
            x[e, self.answer_start:] = vals[pick]
        return x


def kjv_text(path=None):
    """The KJV text as bytes: from `path` if given (or $TINYLM_KJV), else from /usr/bin/bible."""
    path = path or os.environ.get("TINYLM_KJV")
    if path:
        with open(path, "rb") as f:
            return f.read()
    try:
        out = subprocess.run(["bible", "-f", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                             capture_output=True, check=True).stdout
    except FileNotFoundError:
        raise SystemExit("the KJV text needs /usr/bin/bible (Debian packages bible-kjv and bible-kjv-text: "
                         "tools/install_train_deps.sh installs them), or --kjv FILE")
    if len(out) < 4_000_000:
        raise SystemExit(f"`bible -f gen1:1-rev22:21` printed {len(out)} bytes, expected about 4.4 MB")
    return out


class Bytes:
    name = "bytes"
    vocab_size = 256

    def __init__(self, context=512, text=None, held_out=0.05):
        self.context = context
        data = np.frombuffer(text if text is not None else kjv_text(), dtype=np.uint8).astype(np.int64)
        split = int(round(len(data) * (1 - held_out)))
        self.train, self.held = data[:split], data[split:]
        self.n = context

    def params(self):
        return {"source": "bible -f gen1:1-rev22:21 (Debian bible-kjv-text)", "train_bytes": len(self.train),
                "held_out_bytes": len(self.held), "held_out": "last 5%"}

    def batch(self, rng, count):
        starts = rng.integers(0, len(self.train) - self.context, size=count)
        return np.stack([self.train[s:s + self.context] for s in starts])

    def held_out_windows(self, limit=None):
        """Windows of `context` bytes that overlap by one: every held-out byte after the first is
        predicted exactly once (windows start afresh, so each window's early bytes see little context)."""
        step = self.context - 1
        wins = []
        for s in range(0, len(self.held) - 1, step):
            w = self.held[s:s + self.context]
            if len(w) < 2:
                break
            wins.append(w)
            if limit and len(wins) >= limit:
                break
        return wins


def make_task(name, context=None, **kw):
    if name == "selective_copy":
        return SelectiveCopy(region=context or 512, **kw)
    if name == "assoc_recall":
        return AssocRecall(region=context or 512, **kw)
    if name == "bytes":
        return Bytes(context=context or 512, **kw)
    raise ValueError(name)


def eval_examples(task, count=1000):
    """The held-out examples of a synthetic task: the same for every model and training seed."""
    return task.batch(np.random.default_rng(EVAL_SEED), count)
