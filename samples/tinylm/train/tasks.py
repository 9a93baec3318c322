"""The tinylm tasks: deterministic data generators (numpy, seeded).

selective_copy  (the selective copying task of Gu & Dao's Mamba paper, as in PolySketchFormer's
    appendix): a region of `region` tokens, all noise (token 0) except `copy` colored tokens
    (1 .. colors; repeats allowed, or all distinct with `distinct`) at random positions; then a
    separator (colors + 1); then the colored tokens in order. n = region + 1 + copy; the answer is the last `copy` tokens.

assoc_recall    (multi-query associative recall, after Zoology's MQAR, with each key-value pair
    bound in one token): every example has its own dictionary, a value (0 .. values-1) for each
    of the `keys` keys. The first half of a region of `region` tokens holds the dictionary as pair
    tokens, one per key, (key a, value c) -> pair0 + a * values + c, at random places among noise
    tokens (0), in random order; the second half holds `queries` queries "key value" (key tokens
    1 .. keys, value tokens value0 + c) at random places: each value is recalled from the first
    half (and trained on). Then a separator, a key, and its value: n = region + 3; the answer
    is the last token.

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
EVAL_SEED = 20240601  # the held-out test examples: one stream, distinct from every training stream
VALID_SEED = 20240602  # the validation examples (learning rates and other choices): not the test stream


class SelectiveCopy:
    name = "selective_copy"

    def __init__(self, region=512, copy=16, colors=16, distinct=False):
        assert copy <= region and (not distinct or copy <= colors)
        self.region, self.copy, self.colors, self.distinct = region, copy, colors, distinct
        self.sep = colors + 1
        self.vocab_size = colors + 2
        self.n = region + 1 + copy
        self.answer_start = region + 1

    def params(self):
        return {"region": self.region, "copy": self.copy, "colors": self.colors,
                "distinct_colors": int(self.distinct), "noise_token": 0, "color_tokens": f"1..{self.colors}", "separator_token": self.sep,
                "answer_start": self.answer_start, "seq_len": self.n}

    def batch(self, rng, count):
        x = np.zeros((count, self.n), dtype=np.int64)
        for e in range(count):
            pos = np.sort(rng.choice(self.region, size=self.copy, replace=False))
            if self.distinct:
                col = rng.choice(self.colors, size=self.copy, replace=False) + 1
            else:
                col = rng.integers(1, self.colors + 1, size=self.copy)
            x[e, pos] = col
            x[e, self.region] = self.sep
            x[e, self.answer_start:] = col
        return x


class AssocRecall:
    name = "assoc_recall"

    def __init__(self, region=512, keys=8, values=8, queries=32):
        assert 2 * keys + 4 * queries <= region
        self.region, self.keys, self.values, self.queries = region, keys, values, queries
        self.pair0 = keys + 1                       # pair token of (key a, value c): pair0 + a * values + c
        self.value0 = self.pair0 + keys * values    # value token c: value0 + c
        self.sep = self.value0 + values
        self.vocab_size = self.sep + 1
        assert self.vocab_size <= 256
        self.n = region + 3
        self.answer_start = region + 2

    def params(self):
        return {"region": self.region, "keys": self.keys, "values": self.values, "queries": self.queries,
                "noise_token": 0, "key_tokens": f"1..{self.keys}",
                "pair_tokens": f"{self.pair0}..{self.value0 - 1} (key a, value c: {self.pair0} + a * {self.values} + c)",
                "value_tokens": f"{self.value0}..{self.sep - 1}", "separator_token": self.sep,
                "answer_start": self.answer_start, "seq_len": self.n}

    @staticmethod
    def _places(rng, length, items, width):
        """Starts of `items` non-overlapping runs of `width` tokens at random in `length` tokens."""
        free = length - items * width
        slots = np.sort(rng.choice(items + free, size=items, replace=False))
        return slots + np.arange(items) * (width - 1)

    def train_batch(self, rng, count):
        """(tokens, mask): mask[e, i] when token i is trained on (every query's value, the answer)."""
        x = np.zeros((count, self.n), dtype=np.int64)
        mask = np.zeros((count, self.n), dtype=bool)
        half = self.region // 2
        for e in range(count):
            vals = rng.integers(0, self.values, size=self.keys)           # the example's dictionary
            x[e, self._places(rng, half, self.keys, 1)] = self.pair0 + np.arange(self.keys) * self.values + vals
            qs = rng.integers(0, self.keys, size=self.queries)
            starts = half + self._places(rng, self.region - half, self.queries, 2)
            x[e, starts] = qs + 1
            x[e, starts + 1] = self.value0 + vals[qs]
            mask[e, starts + 1] = True
            q = rng.integers(0, self.keys)
            x[e, self.region] = self.sep
            x[e, self.region + 1] = q + 1
            x[e, self.answer_start] = self.value0 + vals[q]
            mask[e, self.answer_start] = True
        return x, mask

    def batch(self, rng, count):
        return self.train_batch(rng, count)[0]


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
    """The held-out test examples of a synthetic task: the same for every model and training seed."""
    return task.batch(np.random.default_rng(EVAL_SEED), count)


def valid_examples(task, count=500):
    """The validation examples of a synthetic task, from their own stream (VALID_SEED): choices such
    as the learning rate are made on these, so the test examples stay unseen until the end.
    (Training streams are seeded by the run's --seed, small integers, never these seeds.)"""
    return task.batch(np.random.default_rng(VALID_SEED), count)
