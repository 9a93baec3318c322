# Sourced by tools/gpu_run.sh: the peer steps (torch on the same GPU, psk's decode step, the
# tinylm sample model).

do_torch() {
    if ((lavapipe)); then
        # No CUDA here: the script must still start, say why it cannot run, and exit 1.
        tmo 60 python3 "$repo/tools/torch_peer_cuda.py" --out "$work/torch_peer.jsonl" --what env
        local rc=$?
        say "$( ((rc == 1)) && echo OK || echo FAIL) torch peer (lavapipe mode): exit $rc, $(head -c 200 "$work/torch_peer.jsonl" 2>/dev/null)"
        ((rc == 1))
        return
    fi
    local left=$((step_end - SECONDS - 5)) ns hs
    ns=$(tr ' ' ',' <<<"$(list "$bench_n")" | sed 's/,$//')
    hs=$head_dims
    ((quick)) && ns=4096,8192
    PYTHONUNBUFFERED=1 tmo $((left + 3)) python3 "$repo/tools/torch_peer_cuda.py" --out "$work/torch_peer.jsonl" \
        --n "$ns" --heads "$heads" --head-dim "$hs" --dtype f16 --decode-context "$decode_context" \
        --time-limit "$left" --shape-limit 15
    local rc=$?
    # A table for the caller: SDPA medians by backend, decode medians.
    python3 - "$work/torch_peer.jsonl" <<'PY' | tee "$work/torch_table.txt" | show
import json, sys
recs = []
for line in open(sys.argv[1]):
    try:
        recs.append(json.loads(line))
    except ValueError:
        pass
for r in recs:
    if r.get("type") == "env":
        if not r.get("available"):
            print("torch: unavailable:", r.get("reason"))
            continue
        smi = r.get("nvidia_smi", {})
        g = (smi.get("gpus") or [{}])[0]
        print(f"torch {r['torch']} CUDA {r['cuda']} cuDNN {r['cudnn']} on {r['gpu']}; driver {g.get('driver_version', '?')}, "
              f"SM clock {g.get('clocks.sm', '?')} (max {g.get('clocks.max.sm', '?')})")
    if r.get("type") == "ceiling" and r.get("status") == "ok":
        if r["what"] == "copy":
            print(f"ceiling copy: {r['gb_per_s_read_plus_write']:.0f} GB/s (read + write)")
        else:
            print(f"ceiling matmul {r['dtype']}: {r['tflops']:.1f} TFLOP/s")
sd = {}
backs = []
for r in recs:
    if r.get("type") == "sdpa":
        b = r["backend"]
        if b not in backs:
            backs.append(b)
        sd[(r["head_dim"], r["n"], b)] = "%.3f" % r["median_ms"] if r.get("status") == "ok" else r.get("status", "?")
if sd:
    print("SDPA causal f16 median ms, B=1 H=16:")
    print("%4s %7s " % ("h", "n") + " ".join("%11s" % b for b in backs))
    for h, n in sorted({(k[0], k[1]) for k in sd}):
        print("%4d %7d " % (h, n) + " ".join("%11s" % sd.get((h, n, b), "") for b in backs))
dec = [r for r in recs if r.get("type") == "decode"]
if dec:
    print("decode step, 1 query against a KV cache of L tokens, H=16: us, median of single calls / mean of graph replays")
    lines = {}
    for r in dec:
        key = (r["dtype"], r["backend"], r["head_dim"])
        if r.get("status") == "ok":
            g = r.get("graph_mean_ms")
            cell = "L=%d %.1f/%s" % (r["context"], r["median_ms"] * 1e3, "%.1f" % (g * 1e3) if g else "n/a")
        else:
            cell = "L=%d %s" % (r["context"], r.get("status"))
        lines.setdefault(key, []).append(cell)
    for (d, b, h), cells in lines.items():
        print(f"  {d} h={h} {b:15s} " + "  ".join(cells))
PY
    local count
    count=$(grep -c '"status": "ok"' "$work/torch_peer.jsonl" 2>/dev/null)
    say "$( ((rc == 0)) && echo OK || echo FAIL) torch peer: exit $rc, ${count:-0} measurements ok (torch_peer.jsonl)"
    return "$rc"
}

# One line of a psk bench --decode CSV: "what L=context: us/step (steps)" per row, or its status.
decode_summary() {
    [[ -f "$work/clocks.py" ]] || write_clocks_py
    python3 - "$1" "$work" "$clock_log" <<'PY'
import csv, sys
sys.path.insert(0, sys.argv[2])
import clocks
samples = clocks.load(sys.argv[3])
try:
    rows = list(csv.DictReader(open(sys.argv[1])))
except OSError:
    print("no CSV")
    sys.exit(0)
out = []
for r in rows:
    what = "polysketch r=%s" % r["sketch_size"] if r["kind"] == "polysketch" else r["kind"]
    if r["status"] == "ok":
        # The SM clock over the row's timed steps: a step per host round trip leaves the GPU idle
        # between steps, and the clock follows (the fourth H200 run: 28 to 135 us for one step).
        clock = clocks.tag(clocks.judge(samples, r.get("timed_start_unix"), r.get("timed_end_unix"))) if samples else ""
        out.append(f"{what} L={r['context']}: {float(r['median_ms']) * 1e3:.1f} us/step ({r['steps']} steps){clock}")
    else:
        out.append(f"{what} L={r['context']}: {r['status']}: {r['reason'][:100]}")
print("; ".join(out))
PY
}

do_decode() {
    local rc=0 ctx decode_warmup_ms=1000
    ((quick)) && decode_warmup_ms=0
    ctx=$(tr ' ' ',' <<<"$(list "$decode_context")" | sed 's/,$//')
    mkdir -p "$work/bench"
    # Decoding supports float32 states only (pskCreateDecodeState), so f32; one block cycle of steps,
    # device-resident: the timed steps recorded in one command buffer after a second of warm-up
    # steps (one step per host round trip, the host form, left the GPU idle and its clock falling).
    tmo 120 "$PSK" bench --decode --resident --kinds polysketch,softmax --context "$ctx" --heads "$heads" --head-dim 64 \
        --dtype f32 --degree 4 --sketch-size 32,64 --block-size 256 --local-exact --warmup 256 --warmup-ms "$decode_warmup_ms" \
        --json "$work/bench/decode.json" --csv "$work/bench/decode.csv" >"$work/bench/decode.txt" 2>&1 || rc=$?
    cat "$work/bench/decode.txt"
    say "$( ((rc == 0)) && echo OK || echo FAIL) decode f32 H=$heads h=64: $(decode_summary "$work/bench/decode.csv")$( ((rc == 124)) && echo ' [time limit]')"
    # The r = 32 step again, contexts in the reverse order and no softmax state made before it: a
    # time that depends on the order (the third H200 run: 31 us at 4k first, 94 at 32k and 128k
    # after the softmax rows) is not the kernel's. The fourth run's clock log placed it: one step
    # per host round trip left the GPU idle between steps, its SM clock swung from 345 to 1980
    # MHz within the rows, and each row's time followed its clock (the tag after every row); the
    # resident timing above is meant to remove that, and this row checks it.
    local rc2=0 rev
    rev=$(tr ',' '\n' <<<"$ctx" | tac | tr '\n' ',' | sed 's/,$//')
    tmo 60 "$PSK" bench --decode --resident --kinds polysketch --context "$rev" --heads "$heads" --head-dim 64 \
        --dtype f32 --degree 4 --sketch-size 32 --block-size 256 --local-exact --warmup 256 --warmup-ms "$decode_warmup_ms" \
        --csv "$work/bench/decode-reverse.csv" >"$work/bench/decode-reverse.txt" 2>&1 || rc2=$?
    cat "$work/bench/decode-reverse.txt"
    say "$( ((rc2 == 0)) && echo OK || echo FAIL) decode, contexts in reverse order: $(decode_summary "$work/bench/decode-reverse.csv")"
    ((rc == 0)) && rc=$rc2
    return "$rc"
}

do_tinylm() {
    # The sample model generating after prompts of 1k..32k tokens, polysketch against the same
    # model with softmax attention (KV cache): docs/PERFORMANCE.md, "tinylm generation".
    local rc=0 m ctx=1024,4096,16384,32768 tokens=128 line=""
    ((quick)) && ctx=256,1024 && tokens=16
    [[ -x "$bin_root/bin/tinylm" ]] || { say "SKIP tinylm: not packed"; return 0; }
    mkdir -p "$work/tinylm"
    for m in bytes_polysketch bytes_softmax; do
        local model="$repo/samples/tinylm/models/$m.safetensors"
        [[ -f "$model" ]] || continue
        tmo 150 "$bin_root/bin/tinylm" bench "$model" --context "$ctx" --tokens "$tokens" --json "$work/tinylm/$m.json" \
            >"$work/tinylm/$m.txt" 2>&1 || rc=$?
        cat "$work/tinylm/$m.txt"
        line+="$m: $(awk -F'|' '/^\| [0-9]/ { printf "L=%d %.2f ms/token, ", $2, $5 }' "$work/tinylm/$m.txt"); "
    done
    # The same polysketch model recording every token's command buffer (the replayed step's comparison).
    local model="$repo/samples/tinylm/models/bytes_polysketch.safetensors"
    if [[ -f "$model" ]]; then
        TINYLM_RECORD_EACH_STEP=1 tmo 150 "$bin_root/bin/tinylm" bench "$model" --context "$ctx" --tokens "$tokens" \
            --json "$work/tinylm/bytes_polysketch_recorded.json" >"$work/tinylm/bytes_polysketch_recorded.txt" 2>&1 || rc=$?
        cat "$work/tinylm/bytes_polysketch_recorded.txt"
        line+="bytes_polysketch recorded per token: $(awk -F'|' '/^\| [0-9]/ { printf "L=%d %.2f ms/token, ", $2, $5 }' "$work/tinylm/bytes_polysketch_recorded.txt"); "
    fi
    say "$( ((rc == 0)) && echo OK || echo FAIL) tinylm bench: $line$( ((rc == 124)) && echo ' [time limit]')"
    return "$rc"
}

