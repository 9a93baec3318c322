# Sourced by tools/gpu_run.sh: the bench (the sweep, split or skipped where one call does not fit
# the device's limits) and the stage proxies.
#
# Timing hygiene (docs/GPU_RUN.md): psk bench --resident times device-resident calls (q, k, v
# uploaded once, one recorded command buffer submitted back to back: no host copy or NaN scan
# between the timed runs) after at least PSK_GPU_WARMUP runs and PSK_GPU_WARMUP_MS of them; the
# stage times come from PSK_GPU_HOST_RUNS host-form calls right after. Where nvidia-smi exists,
# the SM clock is logged in the background (tools/gpu_run.sh, start_clock_log) and each bench row
# is matched against the samples of its timed span: a row whose median SM clock is below 90 % of
# the maximum is flagged LOW CLOCK.

# why_too_large KIND N H h R [ELEMENT_BYTES]: the reason a call of B=1, H heads does not fit
# (empty when it fits), from the library's workspace layout (lib/forward/polysketch_forward.cpp
# polysketchWorkspace, p = 4 local exact, b = 256; lib/forward/tiled_forward.cpp for softmax above
# 8192 tokens) and the limits.
why_too_large() {
    local kind=$1 n=$2 H=$3 h=$4 r=${5:-0} e=${6:-2} b=256 two32=$((1 << 32))
    local range=$lim_range alloc=$lim_alloc
    ((range > 0)) || return 0
    ((alloc > 0)) || alloc=$((1 << 62))
    local tensor=$((H * n * h * e))
    ((tensor > range)) && { echo "q/k/v of $tensor bytes > maxStorageBufferRange $range"; return 0; }
    if [[ $kind == softmax ]]; then
        ((n <= 8192)) && return 0
        local st=$((H * n * (h + 2)))
        ((st >= two32 || st * 4 > range)) && { echo "softmax key-chunk state $((st * 4)) bytes > maxStorageBufferRange $range"; return 0; }
        ((st * 4 > alloc)) && { echo "softmax workspace $((st * 4)) bytes > maxMemoryAllocationSize $alloc"; return 0; }
        return 0
    fi
    local F=$((r * (r + 1) / 2)) t=$(((n + b - 1) / b)) align=4
    ((lavapipe && h <= 128 && r % 4 == 0)) && align=8 # the lane-team output's state rows
    local stride=$(((h + 1 + align - 1) / align * align))
    # The library splits a workspace over maxMemoryAllocationSize into several buffers
    # (lib/forward/workspace.hpp): only a single region larger than a limit stops a call.
    local name floats
    for name in "q sketches:$((H * n * r))" "k sketches:$((H * n * r))" "local q rows:$((H * n * h))" \
        "local k rows:$((H * n * h))" "states:$((H * t * F * stride))"; do
        floats=${name##*:}
        if ((floats >= two32 || floats * 4 > range)); then
            echo "polysketch ${name%%:*} $((floats * 4)) bytes > maxStorageBufferRange $range"
            return 0
        fi
        if (((floats * 4 + 255) / 256 * 256 > alloc)); then
            echo "polysketch ${name%%:*} $((floats * 4)) bytes > maxMemoryAllocationSize $alloc"
            return 0
        fi
    done
    return 0
}

# bench_call NAME LIMIT ARGS...: one psk bench invocation (JSON, CSV and its table under
# $work/bench): device-resident unless PSK_GPU_RESIDENT=0 (or psk could not open the device itself,
# then host-form calls from there on), with the warm-up time; $bench_host_runs host-form runs after.
bench_host_runs=""
bench_call() {
    local name=$1 limit=$2
    shift 2
    mkdir -p "$work/bench"
    local timing=(--warmup-ms "$warmup_ms")
    ((resident)) && timing+=(--resident --host-runs "${bench_host_runs:-$host_runs}")
    tmo "$limit" "$PSK" bench --batch 1 --runs "$runs" --warmup "$warmup" "${timing[@]}" --json "$work/bench/$name.json" \
        --csv "$work/bench/$name.csv" "$@" >"$work/bench/$name.txt" 2>&1
    local rc=$?
    if ((rc == 1 && resident)) && grep -q '^psk bench: --resident:' "$work/bench/$name.txt"; then
        say "NOTE bench: no device-resident timing ($(grep -m1 '^psk bench: --resident:' "$work/bench/$name.txt" | cut -c 27-200)); host-form calls from here on"
        resident=0
        mv "$work/bench/$name.txt" "$work/bench/$name.resident-failed.txt"
        tmo "$limit" "$PSK" bench --batch 1 --runs "$runs" --warmup "$warmup" --warmup-ms "$warmup_ms" --json "$work/bench/$name.json" \
            --csv "$work/bench/$name.csv" "$@" >"$work/bench/$name.txt" 2>&1
        rc=$?
    fi
    cat "$work/bench/$name.txt"
    return "$rc"
}

# The SM clock against the bench rows: $work/clocks.py (a module for the tables, and a command).
write_clocks_py() {
    cat >"$work/clocks.py" <<'PY'
"""The nvidia-smi clock log (clocks.csv: a header line naming the fields, then one line per sample)
against time spans: the median SM clock of a span, a LOW CLOCK flag below 90 % of the maximum,
and the clock-event reasons seen."""
import datetime, statistics, sys

REASONS = {0x1: "idle", 0x2: "applications clocks setting", 0x4: "SW power cap", 0x8: "HW slowdown",
           0x10: "sync boost", 0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake",
           0x100: "display clock setting"}
LOW = 0.9


def load(path):
    """[(unix seconds, SM MHz, max SM MHz, reasons bit mask or None)]"""
    out = []
    try:
        lines = open(path, encoding="utf-8", errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines[1:]:
        f = [x.strip() for x in line.split(",")]
        if len(f) < 3:
            continue
        try:
            t = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            sm, mx = float(f[1]), float(f[2])
        except ValueError:
            continue
        reasons = None
        if len(f) > 3:
            try:
                reasons = int(f[3], 16)
            except ValueError:
                pass
        out.append((t, sm, mx, reasons))
    return out


def max_clock(samples):
    return max((s[2] for s in samples), default=0.0)


def reason_names(mask):
    return [name for bit, name in REASONS.items() if mask & bit] + (["0x%x" % (mask & ~0x1FF)] if mask & ~0x1FF else [])


def span(samples, t0, t1):
    """The samples of [t0, t1] (widened by 50 ms); the nearest one within 0.5 s when none."""
    inside = [s for s in samples if t0 - 0.05 <= s[0] <= t1 + 0.05]
    if inside or not samples:
        return inside
    mid = (t0 + t1) / 2
    near = min(samples, key=lambda s: abs(s[0] - mid))
    return [near] if abs(near[0] - mid) <= 0.5 + (t1 - t0) / 2 else []


def judge(samples, t0, t1):
    """{"sm_median", "sm_max", "samples", "low", "reasons"} of one span, or None without samples."""
    try:
        t0, t1 = float(t0), float(t1)
    except (TypeError, ValueError):
        return None
    got = span(samples, t0, t1)
    if not got:
        return None
    mx = max_clock(samples)
    med = statistics.median(s[1] for s in got)
    mask = 0
    for s in got:
        mask |= s[3] or 0
    return {"sm_median": med, "sm_max": mx, "samples": len(got), "low": mx > 0 and med < LOW * mx,
            "reasons": reason_names(mask & ~0x1)}


def tag(j):
    if j is None:
        return ""
    if j["low"]:
        return " [LOW CLOCK: SM median %.0f MHz < 90%% of %.0f%s]" % (
            j["sm_median"], j["sm_max"], ("; " + ", ".join(j["reasons"])) if j["reasons"] else "")
    return " [SM %.0f MHz]" % j["sm_median"]


def summary(samples, t0, t1, rows):
    """One line: the clock over [t0, t1] and how many bench rows were flagged."""
    got = [s for s in samples if t0 <= s[0] <= t1]
    if not got:
        return "no samples during the bench"
    sm = sorted(s[1] for s in got)
    mask = 0
    for s in got:
        mask |= s[3] or 0
    judged = [j for j in rows if j is not None]
    low = sum(1 for j in judged if j["low"])
    return ("%d samples: SM min %.0f / median %.0f / max %.0f MHz of max %.0f; reasons seen: %s; rows below 90%%: %d of %d"
            % (len(sm), sm[0], statistics.median(sm), sm[-1], max_clock(samples), ", ".join(reason_names(mask)) or "none",
               low, len(judged)))


if __name__ == "__main__" and sys.argv[1] == "summary":
    import csv, glob, os
    samples = load(sys.argv[2])
    rows = []
    for path in glob.glob(os.path.join(sys.argv[5], "*.csv")):
        if os.path.basename(path) in ("all.csv", "decode.csv"):
            continue
        for r in csv.DictReader(open(path)):
            if r.get("timed_start_unix"):
                rows.append(judge(samples, r["timed_start_unix"], r["timed_end_unix"]))
    print(summary(samples, float(sys.argv[3]), float(sys.argv[4]), rows))
PY
}

# One line per configuration of a CSV: "r=32 5.203 ms 19.0 TFLOP/s" (x SPLIT calls when split).
csv_summary() {
    python3 - "$1" "${2:-1}" "$work" "$clock_log" <<'PY'
import csv, sys
path, split = sys.argv[1], int(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import clocks
samples = clocks.load(sys.argv[4])
parts = []
try:
    rows = list(csv.DictReader(open(path)))
except OSError as e:
    print(f"no CSV ({e.strerror})")
    sys.exit(0)
dtypes = {r["dtype"] for r in rows}
for r in rows:
    what = f"r={r['sketch_size']}" if r["kind"] == "polysketch" else r["kind"]
    if len(dtypes) > 1:
        what += " " + r["dtype"]
    if r["status"] != "ok":
        parts.append(f"{what} {r['status']}: {r['reason'][:120]}")
        continue
    ms = float(r["median_ms"])
    tf = float(r["tflops"])
    # Per-stage GPU times where psk bench records them (PskForwardStats' stage times).
    st = [(k, r.get(k + "_ms") or "") for k in ("feature_map", "block_states", "prefix", "output")]
    stages = ""
    if r["kind"] == "polysketch" and all(v for _, v in st):
        stages = " [features %.3f, states %.3f, prefix %.3f, output %.3f ms]" % tuple(float(v) for _, v in st)
    # The host form's median after a resident run, and the SM clock during the timed runs.
    extra = ""
    if r.get("timing") == "resident" and r.get("host_median_ms"):
        extra += " (host form %.3f)" % float(r["host_median_ms"])
    extra += clocks.tag(clocks.judge(samples, r.get("timed_start_unix"), r.get("timed_end_unix")))
    if split > 1:
        parts.append(f"{what} {split} calls x {ms:.3f} = {split * ms:.3f} ms ({r['heads']} heads each), {tf:.1f} TFLOP/s{stages}{extra}")
    else:
        parts.append(f"{what} {ms:.3f} ms, {float(r['ms_per_token']) * 1e3:.4f} us/token, {tf:.1f} TFLOP/s{stages}{extra}")
print("; ".join(parts) if parts else "no rows")
PY
}

# bench_group KIND N h: polysketch (every fitting sketch size in one call; a sketch size that does not
# fit H heads runs as H/s calls of H/s heads) or softmax, at one n and head dim.
bench_group() {
    local kind=$1 n=$2 h=$3 name="$1-h$3-n$2" limit=$4 rc=0 r why fit=() s sub
    [[ ",$bench_kinds," == *",$kind,"* ]] || return 0
    # Softmax in f16; polysketch in every type of PSK_GPU_BENCH_DTYPES (one call: the inputs are
    # drawn once), sized for the widest.
    local common=(--n "$n" --head-dim "$h" --dtype "$( [[ $kind == softmax ]] && echo f16 || echo "$bench_dtypes")") e=2
    [[ $kind != softmax && ",$bench_dtypes," == *",f32,"* ]] && e=4
    if [[ $kind == softmax ]]; then
        why=$(why_too_large softmax "$n" "$heads" "$h")
        if [[ -n "$why" ]]; then
            say "SKIP bench $name: $why"
            return 0
        fi
        # Quadratic: fewer runs at the longest contexts so that the invocation ends inside its limit.
        local runs=$runs warmup=$warmup bench_host_runs=1
        ((n > 32768 && !quick)) && runs=3 warmup=1
        ((host_runs < 1)) && bench_host_runs=0
        bench_call "$name" "$limit" --kinds softmax --heads "$heads" "${common[@]}" || rc=$?
        say "$( ((rc == 0)) && echo OK || echo FAIL) bench $name H=$heads: $(csv_summary "$work/bench/$name.csv")$( ((rc == 124)) && echo ' [time limit]')"
        return "$rc"
    fi
    local pk=(--kinds polysketch --degree 4 --block-size 256 --local-exact)
    for r in ${sketches//,/ }; do
        why=$(why_too_large polysketch "$n" "$heads" "$h" "$r" "$e")
        if [[ -z "$why" ]]; then
            fit+=("$r")
            continue
        fi
        # Split the heads over calls (same total work; the sum of the calls is the time).
        sub=""
        for s in 2 4 8 16; do
            ((heads % s == 0 && heads / s >= 1)) || continue
            if [[ -z "$(why_too_large polysketch "$n" $((heads / s)) "$h" "$r" "$e")" ]]; then
                sub=$s
                break
            fi
        done
        if [[ -z "$sub" ]]; then
            say "SKIP bench $name r=$r: $why, also with the heads split"
            continue
        fi
        local rc2=0
        bench_call "$name-r$r-split$sub" "$limit" "${pk[@]}" --sketch-size "$r" --heads $((heads / sub)) "${common[@]}" || rc2=$?
        ((rc2)) && rc=$rc2
        say "$( ((rc2 == 0)) && echo OK || echo FAIL) bench $name H=$heads r=$r SPLIT ($why): $(csv_summary "$work/bench/$name-r$r-split$sub.csv" "$sub")"
    done
    if ((${#fit[@]})); then
        local list rc1=0
        list=$(IFS=,; echo "${fit[*]}")
        bench_call "$name" "$limit" "${pk[@]}" --sketch-size "$list" --heads "$heads" "${common[@]}" || rc1=$?
        ((rc1)) && rc=$rc1
        say "$( ((rc1 == 0)) && echo OK || echo FAIL) bench $name H=$heads: $(csv_summary "$work/bench/$name.csv")$( ((rc1 == 124)) && echo ' [time limit]')"
        # The library refused a size the prediction let through: split its heads after all.
        local refused
        refused=$(awk -F, 'NR > 1 && $15 == "skipped" && /TOO_LARGE/ {print $12}' "$work/bench/$name.csv" 2>/dev/null | sort -u)
        for r in $refused; do
            for s in 2 4 8 16; do
                ((heads % s == 0)) || continue
                bench_call "$name-r$r-split$s" "$limit" "${pk[@]}" --sketch-size "$r" --heads $((heads / s)) "${common[@]}" || true
                if awk -F, 'NR > 1 && $15 == "ok" {ok = 1} END {exit !ok}' "$work/bench/$name-r$r-split$s.csv" 2>/dev/null; then
                    say "OK bench $name H=$heads r=$r SPLIT (the library refused one call; not predicted): $(csv_summary "$work/bench/$name-r$r-split$s.csv" "$s")"
                    break
                fi
                rm -f "$work/bench/$name-r$r-split$s".*
            done
        done
    fi
    return "$rc"
}

do_bench() {
    local rc=0 n h ns hs first_h t0 t0_unix
    ns=$(list "$bench_n")
    hs=${head_dims//,/ }
    first_h=${hs%% *}
    t0=$SECONDS t0_unix=$(date +%s.%N)
    write_clocks_py
    # psk micro (docs/MODEL.md): the barrier round and the L2 / HBM dependent-load latency that the
    # model's Machine constants barrier, lat_l2 and lat_hbm assume, the loads an invocation keeps in
    # flight (specialized loops, across barriers), shared-memory stores, and the cooperative
    # products' rate with their fragment loads (tc_vk); a few seconds, before the sweep.
    mkdir -p "$work/bench"
    local micro_rc=0
    # --quick on a quick run (lavapipe's self-test: the emulated cooperative products' pipelines
    # alone take tens of seconds to build there).
    local micro_quick=()
    ((quick)) && micro_quick=(--quick)
    tmo 30 "$PSK" micro "${micro_quick[@]}" --json "$work/bench/micro.json" >"$work/bench/micro.txt" 2>&1 || micro_rc=$?
    cat "$work/bench/micro.txt"
    if ((micro_rc == 0)) && [[ -s "$work/bench/micro.json" ]]; then
        say "OK micro: $(python3 - "$work/bench/micro.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
b = " ".join("%dx%d %.1f" % (r["threads"], r["workgroups_per_sm"], r["ns_per_barrier"]) for r in m["barrier"] if r["ns_per_barrier"] is not None)
c = ", ".join("%s (%d MiB) %.1f" % (r["level"], r["bytes"] >> 20, r["ns_per_load"]) for r in m["chase"])
d = m.get("dispatches") or []
if d:
    c += "; us per dependent dispatch (%d in one command buffer): %.2f" % (d[0]["dispatches"], d[0]["us_per_dispatch"])
s = {r.get("form", "128-bit" if r["packed"] else "16-bit"): r["ns_per_iteration"]
     for r in m.get("shared_store", []) if r["threads"] == 128 and r["workgroups_per_sm"] == 4}
if s.get("16-bit") is not None and s.get("128-bit"):
    c += "; shared stores (128 threads x 4 wg/SM) ns per iteration: 16-bit %.1f, packed %.1f, ratio %.2f" % (s["16-bit"], s["128-bit"], s["16-bit"] / s["128-bit"])
    if s.get("16-bit-contiguous") is not None:
        c += ", 16-bit contiguous %.1f" % s["16-bit-contiguous"]
cm = m.get("coopmat") or {}
rows = [r for r in cm.get("rows", []) if r["tflops"] is not None]
if rows:
    c += "; cooperative products (%s, TFLOP/s at 1 / 4 wg/SM): %s" % (cm["variant"], ", ".join(
        "%s %s" % (op, " / ".join("%.0f" % r["tflops"] for r in rows if r["operands"] == op))
        for op in dict.fromkeys(r["operands"] for r in rows)))
elif cm:
    c += "; cooperative products: %s" % cm.get("note", "")
f = lambda v, fmt: "-" if v is None else fmt % v
pct = lambda v: "-" if v is None else "%.0f%%" % (100 * v)
inf = (m.get("inflight") or {}).get("summary", [])
if inf:
    c += "; loads in flight (spec / runtime loops over literal; latency hidden under work / across barriers): " + ", ".join(
        "%s %s / %s; %s / %s" % (r["level"], f(r["spec_over_literal"], "%.2fx"), f(r["runtime_over_literal"], "%.2fx"),
                                pct(r["hidden_under_work"]), pct(r["hidden_across_barriers"])) for r in inf)
print("ns per barrier (threads x workgroups/SM, %d SMs): %s; ns per dependent load: %s" % (m["multiprocessors"], b, c))
PY
)"
    else
        say "FAIL micro (exit $micro_rc): $(tail -1 "$work/bench/micro.txt" | cut -c 1-200)"
    fi
    # PSK_GPU_BENCH_TABLE=tuned: this run's psk tune tables (merge_tuned_tables) for every row.
    if [[ ${PSK_GPU_BENCH_TABLE:-built-in} == tuned ]]; then
        if [[ -s "$work/tune/tuned-all.tuning" ]]; then
            local -x PSK_TUNING_TABLE="$work/tune/tuned-all.tuning"  # this step only
            say "bench: tuning table tune/tuned-all.tuning (this run's psk tune; PSK_GPU_BENCH_TABLE=tuned)"
        else
            say "bench: the built-in tuning table (PSK_GPU_BENCH_TABLE=tuned, but the tune step left no table)"
        fi
    fi
    say "bench: B=1 H=$heads causal, n = $ns, h = $hs, kinds $bench_kinds (polysketch p=4 r=${sketches} b=256 local exact, $bench_dtypes; softmax f16); $runs runs after $warmup warm-up and >= ${warmup_ms} ms; $( ((resident)) && echo "device-resident calls, stage times from $host_runs host-form calls after" || echo "host-form calls"); SM clock $clock_note"
    # In order of value, so that a cut keeps the most wanted: polysketch and softmax at the first head
    # dim (softmax's two longest last), polysketch at the other head dims, then softmax there.
    local big_softmax=()
    for n in $ns; do bench_group polysketch "$n" "$first_h" 60 || rc=1; done
    for n in $ns; do
        if ((n > 32768)); then big_softmax+=("$n"); continue; fi
        bench_group softmax "$n" "$first_h" 60 || rc=1
    done
    for h in ${hs#"$first_h"}; do
        for n in $ns; do bench_group polysketch "$n" "$h" 60 || rc=1; done
    done
    for n in "${big_softmax[@]}"; do bench_group softmax "$n" "$first_h" 90 || rc=1; done
    for h in ${hs#"$first_h"}; do
        for n in $ns; do bench_group softmax "$n" "$h" 90 || rc=1; done
    done
    # All rows in one CSV, and a table for the caller.
    python3 - "$work/bench" "$work" "$clock_log" <<'PY' | tee "$work/bench/table.txt" | show
import csv, glob, os, sys
sys.path.insert(0, sys.argv[2])
import clocks
samples = clocks.load(sys.argv[3])
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    if os.path.basename(path) in ("all.csv", "decode.csv") or os.path.basename(path).startswith("stage-"):
        continue
    split = 1
    base = os.path.basename(path)[:-4]
    if "-split" in base:
        split = int(base.rsplit("-split", 1)[1])
    for r in csv.DictReader(open(path)):
        r["split"] = split
        rows.append(r)
if not rows:
    print("bench table: no results")
    sys.exit(0)
with open(os.path.join(sys.argv[1], "all.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
dtypes = sorted({r["dtype"] for r in rows if r["kind"] == "polysketch"})
def key(r):
    if r["kind"] == "softmax":
        return "softmax"
    return f"poly r={r['sketch_size']}" + (f" {r['dtype']}" if len(dtypes) > 1 else "")
cols = sorted({key(r) for r in rows}, key=lambda c: (c == "softmax", c))
cells, flags = {}, {}
for r in rows:
    ms = float(r["median_ms"]) * r["split"] if r["status"] == "ok" else None
    k = (int(r["head_dim"]), int(r["n"]), key(r))
    if ms is not None or not isinstance(cells.get(k), float):  # a split run's time beats a refusal
        cells[k] = ms if ms is not None else r["status"]
        j = clocks.judge(samples, r.get("timed_start_unix"), r.get("timed_end_unix")) if ms is not None else None
        if j is not None:
            flags[k] = j
timing = sorted({r.get("timing") or "host" for r in rows if r["status"] == "ok"})
print("bench table (median ms, B=1, H=%s, causal, %s timing; softmax f16; split calls summed; * = LOW CLOCK: the median"
      " SM clock of the row's timed runs below 90%% of the maximum):" % (max(int(r["heads"]) * r["split"] for r in rows), "/".join(timing)))
p32 = next((c for c in cols if c.startswith("poly r=32") and c.endswith("f16")), "poly r=32")
print("%4s %7s " % ("h", "n") + " ".join("%13s" % c for c in cols) + "   softmax / %s" % p32
      + ("   SM MHz (median of each column's timed runs)" if flags else ""))
for h, n in sorted({(k[0], k[1]) for k in cells}):
    vals = [cells.get((h, n, c), "") for c in cols]
    ratio = ""
    s, p = cells.get((h, n, "softmax")), cells.get((h, n, p32))
    if isinstance(s, float) and isinstance(p, float) and p > 0:
        ratio = "%.2fx" % (s / p)
    def cell(c, v):
        f = flags.get((h, n, c))
        return "%13s" % ((("%.3f" % v) + ("*" if f and f["low"] else "")) if isinstance(v, float) else v)
    mhz = " ".join("%.0f" % flags[(h, n, c)]["sm_median"] if (h, n, c) in flags else "-" for c in cols)
    print("%4d %7d " % (h, n) + " ".join(cell(c, v) for c, v in zip(cols, vals)) + "   %-14s" % ratio + "   " + (mhz if flags else ""))
host = [r for r in rows if r["status"] == "ok" and r.get("timing") == "resident" and r.get("host_median_ms")]
if host:
    print("resident vs host form (the same configuration's host-form calls right after; kernels of each):")
    for r in sorted(host, key=lambda r: (r["kind"], r["dtype"], int(r["head_dim"]), int(r["n"]))):
        print("  %-10s %-4s h=%-4s n=%-7s resident %9.3f ms [%s]  host %9.3f ms [%s]" % (
            r["kind"], r["dtype"], r["head_dim"], r["n"], float(r["median_ms"]), r.get("plan", ""), float(r["host_median_ms"]),
            r.get("host_plan", "")))
stage_keys = ("feature_map_ms", "block_states_ms", "prefix_ms", "output_ms")
staged = [r for r in rows if r["kind"] == "polysketch" and r["status"] == "ok" and all(r.get(k) for k in stage_keys)]
if staged:
    print("polysketch stages (median ms of each stage%s; split calls summed):"
          % ("; from the host-form calls after the resident ones, whose median is 'total'" if host else ""))
    print("%4s %7s %4s %4s %10s %10s %10s %10s %10s" % ("h", "n", "r", "type", "features", "states", "prefix", "output", "total"))
    for r in sorted(staged, key=lambda r: (int(r["head_dim"]), r["dtype"], int(r["sketch_size"]), int(r["n"]))):
        v = [float(r[k]) * r["split"] for k in stage_keys]
        total = float(r["host_median_ms"]) if r.get("timing") == "resident" and r.get("host_median_ms") else float(r["median_ms"])
        print("%4s %7s %4s %4s " % (r["head_dim"], r["n"], r["sketch_size"], r["dtype"]) + " ".join("%10.3f" % x for x in v)
              + " %10.3f" % (total * r["split"]))
PY
    # The SM clock during the bench, for the summary.
    if [[ -s "$clock_log" ]]; then
        say "clocks during the bench: $(python3 "$work/clocks.py" summary "$clock_log" "$t0_unix" "$(date +%s.%N)" "$work/bench" 2>&1 | tail -1)"
    else
        say "clocks during the bench: $clock_note"
    fi
    return "$rc"
}

# Stage proxies at 32k, r = 32, by difference: local exact vs sketched local part (the exact local
# weights' cost), causal vs full (the scan and the local part), learned vs random sketch. psk bench also records each stage's
# GPU time (features, states, prefix, output; PskForwardStats) where the library has them: the
# summary lines and the bench table show those too.
do_stages() {
    local n h rc=0
    n=$( ((quick)) && echo 1000 || echo 32768)
    h=${head_dims%%,*}
    [[ -f "$work/clocks.py" ]] || write_clocks_py
    local base=(--kinds polysketch --degree 4 --sketch-size 32 --block-size 256 --n "$n" --head-dim "$h" --dtype f16 --heads "$heads")
    bench_call "stage-local-exact-n$n" 60 "${base[@]}" --local-exact || rc=1
    bench_call "stage-sketched-local-n$n" 60 "${base[@]}" || rc=1
    bench_call "stage-full-n$n" 60 "${base[@]}" --full || rc=1
    # A learned sketch (a model's feature map: docs/PERFORMANCE.md predicts it the dominant stage).
    bench_call "stage-learned-n$n" 60 "${base[@]}" --local-exact --learned-sketch || rc=1
    # ... and its feature map tiled (features.learned_tile 32; the model's form is the row form
    # since the fourth run timed the tiled one 3.2x slower; docs/MODEL.md, "The learned feature
    # map, tiled"): compare the features column with the row above (the table replaces the
    # device's built-in one, so the other stages may take other kernels here).
    printf 'psk-tuning 1\ndevice any\nfeatures.learned_tile 32\n' >"$work/learned-tiled.tuning"
    (export PSK_TUNING_TABLE="$work/learned-tiled.tuning"
     bench_call "stage-learned-tiled-n$n" 60 "${base[@]}" --local-exact --learned-sketch) || rc=1
    # The FP32 FlashAttention-2 softmax (attention_flash_fp32.comp; docs/MODEL.md, "The FP32
    # FlashAttention-2 baseline", predicts ~48 ms at 32k h = 64 where the one-row kernel measured
    # 124): float32 storage, and float16 without cooperative matrices as the first run timed the
    # one-row kernel.
    local sm=(--kinds softmax --n "$n" --head-dim "$h" --heads "$heads")
    bench_call "stage-softmax-fp32-f32-n$n" 60 "${sm[@]}" --dtype f32 || rc=1
    (export PSK_DISABLE_COOPMAT=1; bench_call "stage-softmax-fp32-f16-n$n" 60 "${sm[@]}" --dtype f16) || rc=1
    (export PSK_FP32_BASELINE=rows; bench_call "stage-softmax-rows-f32-n$n" 60 "${sm[@]}" --dtype f32) || rc=1
    say "$( ((rc == 0)) && echo OK || echo FAIL) FP32 softmax n=$n h=$h H=$heads: f32 storage $(csv_summary "$work/bench/stage-softmax-fp32-f32-n$n.csv") | f16 storage, PSK_DISABLE_COOPMAT=1: $(csv_summary "$work/bench/stage-softmax-fp32-f16-n$n.csv") | the one-row kernel (PSK_FP32_BASELINE=rows), f32: $(csv_summary "$work/bench/stage-softmax-rows-f32-n$n.csv")"
    # Softmax state passing past position 0 (a short query block over the KV cache, split keys;
    # docs/DECODING.md): one causal forward of 8k tokens, and the same as calls of 1024 and of 128
    # tokens each continuing the cache (host-form calls; the times are the sums over the calls).
    local cn=$( ((quick)) && echo 1000 || echo 8192)
    (resident=0; bench_call "stage-softmax-chunks-n$cn" 60 --kinds softmax --n "$cn" --head-dim "$h" --heads "$heads" --dtype f16 \
        --chunk 0,1024,128) || rc=1
    say "$( ((rc == 0)) && echo OK || echo FAIL) softmax chunks n=$cn h=$h H=$heads f16 (one call, calls of 1024, of 128): $(csv_summary "$work/bench/stage-softmax-chunks-n$cn.csv")"
    # Ablations (PSK_ABLATE, docs/MODEL.md "Held against the third H200 run"): the cooperative states
    # and output with one part left out each, so that their stage times say where the time goes (the
    # outputs are wrong: timing only, self-test off, no tuning table, so the cooperative output runs).
    # The output's phi(q)^T Z part split further (its Z range pass, phi(q) expansion, Z staging) and
    # the local part's key-tile staging: docs/MODEL.md, "Where the cooperative output's time goes".
    # With Z staged in the output (PSK_COOPMAT_Z_PACKED=off), as the fourth run measured them: the
    # range pass and the staging are what packed Z removes.
    local ab ablations=""
    for ab in none states.products states.expand states.loads output.inter output.local output.products \
        output.zrange output.expand output.zstage output.kvstage; do
        (export PSK_TUNING_TABLE=none PSK_COOPMAT_SELFTEST=0 PSK_COOPMAT_Z_PACKED=off
         [[ $ab != none ]] && export PSK_ABLATE=$ab
         bench_call "stage-ablate-$ab-n$n" 40 "${base[@]}" --local-exact) || rc=1
        ablations+=" $ab: $(csv_summary "$work/bench/stage-ablate-$ab-n$n.csv");"
    done
    say "$( ((rc == 0)) && echo OK || echo FAIL) ablations n=$n h=$h (cooperative states and output, one part left out):$ablations"
    # The cooperative output computing S(q) and q' from q itself (FUSED_QUERY, planned where the
    # sketch allows; the feature map then runs for k alone) against the feature map's rows, no
    # tuning table so that the cooperative output runs (docs/MODEL.md, "The query side in the
    # cooperative output" predicts features -0.4 ms, output +0.1-0.4 ms at 32k).
    local fq fused=""
    for fq in on off; do
        (export PSK_TUNING_TABLE=none PSK_COOPMAT_FUSED_QUERY=$fq; bench_call "stage-fused-query-$fq-n$n" 60 "${base[@]}" --local-exact) || rc=1
        fused+=" fused query $fq: $(csv_summary "$work/bench/stage-fused-query-$fq-n$n.csv");"
    done
    say "$( ((rc == 0)) && echo OK || echo FAIL) query side n=$n h=$h (cooperative output, no table):$fused"
    # Z as operands packed once per block (z_operands.comp before the output) against each workgroup
    # staging it, no table (the cooperative output runs), at the model's row groups and at 8
    # (docs/MODEL.md, "Z operands packed once per block", predicts 0.3-0.75 ms saved at 2, a wash at 8).
    printf 'psk-tuning 1\ndevice any\noutput.sg_m 8\n' >"$work/row-groups-8.tuning"
    local zp table zops=""
    for table in none "$work/row-groups-8.tuning"; do
        for zp in on off; do
            local tag="z-packed-$zp-$([[ $table == none ]] && echo model || echo sg8)"
            (export PSK_TUNING_TABLE=$table PSK_COOPMAT_Z_PACKED=$zp; bench_call "stage-$tag-n$n" 60 "${base[@]}" --local-exact) || rc=1
            zops+=" $tag: $(csv_summary "$work/bench/stage-$tag-n$n.csv");"
        done
    done
    # Packed at the model's row groups, its prefix and packing as the scan then the packing kernel
    # (a table's prefix.pack_min_groups 4294967295): the packed rows above walk the blocks (the
    # model's choice from 64 packing workgroups), so the two prefix and output stages say what the
    # walk saves (docs/MODEL.md, "The floor of each architecture": 0.15-0.23 ms at 32k on an H200).
    printf 'psk-tuning 1\ndevice any\nprefix.pack_min_groups 4294967295\n' >"$work/no-pack-walk.tuning"
    (export PSK_TUNING_TABLE="$work/no-pack-walk.tuning" PSK_COOPMAT_Z_PACKED=on
     bench_call "stage-z-packed-on-nowalk-n$n" 60 "${base[@]}" --local-exact) || rc=1
    zops+=" z-packed-on-nowalk (scan, then the packing kernel): $(csv_summary "$work/bench/stage-z-packed-on-nowalk-n$n.csv");"
    say "$( ((rc == 0)) && echo OK || echo FAIL) Z operands n=$n h=$h (cooperative output, packed or staged; the model's row groups, output.sg_m 8; packed without the walk):$zops"
    # The walking block states (PSK_COOPMAT_STATES_WALK) against the per-block kernel + scan, at H and
    # at 64 heads (docs/MODEL.md predicts the walk slower with 144 workgroups, faster with 576).
    local w hh walk=""
    for hh in "$heads" 64; do
        for w in on off; do
            (export PSK_COOPMAT_STATES_WALK=$w; bench_call "stage-walk-$w-H$hh-n$n" 60 "${base[@]}" --local-exact --heads "$hh") || rc=1
            walk+=" H=$hh walk $w: $(csv_summary "$work/bench/stage-walk-$w-H$hh-n$n.csv");"
        done
    done
    say "$( ((rc == 0)) && echo OK || echo FAIL) states walk n=$n h=$h:$walk"
    # Float32 storage on the polysketch cooperative kernels with every operand split into float16
    # hi + lo (PSK_COOPMAT_FLOAT32=on; docs/MATH.md, "Products on 16-bit matrix units") against the
    # FP32 kernels float32 takes by default, side by side (docs/MODEL.md, "Float32 storage on the
    # cooperative kernels", predicts the split 1.5-3x slower on an H200: float32.cooperative 0).
    # Last in the step: the ablations and the walk above decide more.
    local b32=(--kinds polysketch --degree 4 --sketch-size 32 --block-size 256 --n "$n" --head-dim "$h" --dtype f32 --heads "$heads" --local-exact)
    (export PSK_COOPMAT_FLOAT32=on; bench_call "stage-f32-split-n$n" 60 "${b32[@]}") || rc=1
    bench_call "stage-f32-fp32-n$n" 60 "${b32[@]}" || rc=1
    say "$( ((rc == 0)) && echo OK || echo FAIL) float32 polysketch n=$n h=$h H=$heads: split hi + lo on the cooperative kernels (PSK_COOPMAT_FLOAT32=on): $(csv_summary "$work/bench/stage-f32-split-n$n.csv") | FP32 kernels: $(csv_summary "$work/bench/stage-f32-fp32-n$n.csv")"
    local a b c d e
    a=$(csv_summary "$work/bench/stage-local-exact-n$n.csv")
    b=$(csv_summary "$work/bench/stage-sketched-local-n$n.csv")
    c=$(csv_summary "$work/bench/stage-full-n$n.csv")
    d=$(csv_summary "$work/bench/stage-learned-n$n.csv")
    e=$(csv_summary "$work/bench/stage-learned-tiled-n$n.csv")
    say "$( ((rc == 0)) && echo OK || echo FAIL) stages n=$n h=$h H=$heads r=32: causal local exact: $a | causal sketched local: $b | full (no scan, no local part): $c | learned sketch, local exact (the row form): $d | learned, feature map tiled (features.learned_tile 32): $e"
    return "$rc"
}

# The generic kernels' ablations (PSK_ABLATE, docs/MODEL.md "The generic kernels, part by part"):
# the FP32 forward (every stage generic) at 32k with one part left out per call, so that its stage
# times say where the generic feature map's, block states' and row output's time goes (the
# outputs are wrong: timing only); the register-tiled output (PSK_GENERIC_OUTPUT=tiles: the model
# has it 2.5x faster than the row kernel, the fourth run 1.7x slower) without its phi(q)^T Z or
# its local part; then the float16 feature map (the table's generic one) with its row loads or
# its products left out, beside its float32 twin, for the float16 feature map's unexplained 1.5x.
# Default tuning table (what users run); the cooperative states of a float16 plan ignore the
# feature map's ablations. Then the same three configurations with the generic kernels' staging
# rolled (PSK_STAGE_ROLLED=1, as a table's generic.stage_rolled 1, the built-in table kept: one
# batch of loads held at a time; the staging's registers).
# 21 calls, ~4 s each.
do_ablations() {
    local n h rc=0
    n=$( ((quick)) && echo 1000 || echo 32768)
    h=${head_dims%%,*}
    [[ -f "$work/clocks.py" ]] || write_clocks_py
    local ab line="" run dtype output rolled
    for run in f32:rows f32:tiles f16:rows f32:rows:rolled f32:tiles:rolled f16:rows:rolled; do
        IFS=: read -r dtype output rolled <<<"$run"
        local parts=(none)
        case $run in
            f32:rows) parts+=(features.products features.loads features.local states.products states.expand states.loads
                              output.inter output.local output.expand output.zstage output.kvstage) ;;
            f32:tiles) parts+=(output.inter output.local) ;;
            f16:rows) parts+=(features.products features.loads) ;;
        esac
        for ab in "${parts[@]}"; do
            local tag="ablate-generic-$dtype-$output${rolled:+-$rolled}-$ab-n$n"
            (unset PSK_ABLATE; [[ $ab != none ]] && export PSK_ABLATE=$ab
             [[ $output == tiles ]] && export PSK_GENERIC_OUTPUT=tiles
             [[ -n $rolled ]] && export PSK_STAGE_ROLLED=1
             bench_call "$tag" 40 --kinds polysketch --degree 4 --sketch-size 32 --block-size 256 \
                 --n "$n" --head-dim "$h" --dtype "$dtype" --heads "$heads" --local-exact) || rc=1
            line+=" $dtype $output${rolled:+ $rolled} $ab: $(csv_summary "$work/bench/$tag.csv");"
        done
    done
    say "$( ((rc == 0)) && echo OK || echo FAIL) generic ablations n=$n h=$h (the generic kernels, one part left out):$line"
    return "$rc"
}

# Frozen specializations (docs/GPU_RUN.md, "Frozen specializations"; docs/MODEL.md, "Specialization
# constants on this driver"): the same calls twice, first as built (PSK_SHADER_DUMP writes every
# specialization compiled), then with each specialization's module frozen by spirv-opt (constants
# made literals, loops unrolled, arrays split: tools/freeze_shaders.py) and read back in its place
# (PSK_SHADER_REPLACE). Polysketch f16 and f32 with the library's defaults; again without the
# tuning table and with the register-tiled generic output (PSK_GENERIC_OUTPUT=tiles), so that the
# cooperative output and the tiled output run (the self-test keeps deciding, as for users, so the
# cooperative feature map stays off where it fails); softmax f16 and f32 (the FlashAttention-2 kernels).
# The fixture runs in both phases too: a frozen module must give the same output.
do_frozen() {
    local n h rc=0
    n=$( ((quick)) && echo 1000 || echo 32768)
    h=${head_dims%%,*}
    local opt="$SPIRV_TOOLS/spirv-opt" val="$SPIRV_TOOLS/spirv-val"
    if [[ ! -x $opt ]]; then
        say "SKIP frozen: no spirv-opt in $SPIRV_TOOLS (tools/gpu_prepare.sh packs one)"
        return 0
    fi
    [[ -f "$work/clocks.py" ]] || write_clocks_py
    local dir="$work/frozen"
    mkdir -p "$dir/dump" "$dir/modules"
    local ps=(--kinds polysketch --degree 4 --sketch-size 32 --block-size 256 --local-exact --n "$n" --head-dim "$h" --heads "$heads" --dtype f16,f32)
    local sm=(--kinds softmax --n "$n" --head-dim "$h" --heads "$heads" --dtype f16,f32)
    local fx=(--sketch-size 32 --block-size 256 --local-exact --degree 4 --seed 0)
    frozen_phase() { # frozen_phase TAG VAR=DIR: the calls of one phase
        local tag=$1 setting=$2 r=0 dt
        # The plans with the compiler's statistics (registers, spills) of each pipeline, as built
        # and frozen: frozen/plan-TAG.txt.
        for dt in f16 f32; do
            (export "$setting" PSK_PIPELINE_STATISTICS=1
             echo "--- polysketch $dt, defaults"
             tmo 20 "$PSK" info --plan --kind polysketch --dtype "$dt" --causal --local-exact --degree 4 --sketch-size 32 \
                 --block-size 256 --head-dim "$h" --heads "$heads"
             echo "--- polysketch $dt, PSK_TUNING_TABLE=none PSK_GENERIC_OUTPUT=tiles"
             PSK_TUNING_TABLE=none PSK_GENERIC_OUTPUT=tiles tmo 20 "$PSK" info --plan --kind polysketch \
                 --dtype "$dt" --causal --local-exact --degree 4 --sketch-size 32 --block-size 256 --head-dim "$h" --heads "$heads"
             echo "--- softmax $dt"
             tmo 20 "$PSK" info --plan --kind softmax --dtype "$dt" --causal --head-dim "$h" --heads "$heads") >>"$dir/plan-$tag.txt" 2>&1 || r=1
        done
        (export "$setting"; bench_call "frozen-$tag-polysketch-n$n" 45 "${ps[@]}") || r=1
        (export "$setting" PSK_TUNING_TABLE=none PSK_GENERIC_OUTPUT=tiles
         bench_call "frozen-$tag-polysketch-untabled-n$n" 45 "${ps[@]}") || r=1
        (export "$setting"; bench_call "frozen-$tag-softmax-n$n" 45 "${sm[@]}") || r=1
        (export "$setting"
         fixture_case "polysketch-$tag-n16461-H1-f16" polysketch 16461 1 f16 "$fixture_tol" "${fx[@]}"
         fixture_case "polysketch-$tag-n16461-H1-f32" polysketch 16461 1 f32 "$fixture_tol32" "${fx[@]}") || r=1
        # The cooperative feature map alone and raw (the self-test keeps it off on NVIDIA so far,
        # docs/RELIABILITY.md), built and frozen: a frozen module that passes where the built one
        # fails puts the fault in the driver's specialization, not in the kernel. Not counted in
        # the step's verdict (the built one is known to fail there). Not on lavapipe, which has no
        # cooperative matrices (the case would run the generic kernel).
        ((lavapipe)) || (export "$setting" PSK_COOPMAT_SELFTEST=0 PSK_COOPMAT_STAGES=features
         fixture_case "coopfeatures-$tag-n16461-H1-f16" polysketch 16461 1 f16 "$fixture_tol" "${fx[@]}") || true
        return "$r"
    }
    frozen_phase built "PSK_SHADER_DUMP=$dir/dump" || rc=1
    tmo 90 python3 "$repo/tools/freeze_shaders.py" "$dir/dump" "$dir/modules" --spirv-opt "$opt" --spirv-val "$val" >"$dir/freeze.txt" 2>&1 || rc=1
    cat "$dir/freeze.txt"
    say "$( ((rc == 0)) && echo OK || echo FAIL) frozen: $(ls "$dir/dump"/*.spec 2>/dev/null | wc -l) specializations dumped; $(tail -1 "$dir/freeze.txt")"
    frozen_phase frozen "PSK_SHADER_REPLACE=$dir/modules" || rc=1
    # Built against frozen, row by row and stage by stage; the frozen rows' kernels ("... N replaced":
    # how many pipelines took a frozen module).
    local cmp
    cmp=$(python3 - "$work/bench" "$n" <<'PY'
import csv, sys
d, n = sys.argv[1], sys.argv[2]
out = []
for cfg in ("polysketch", "polysketch-untabled", "softmax"):
    try:
        a = list(csv.DictReader(open(f"{d}/frozen-built-{cfg}-n{n}.csv")))
        b = list(csv.DictReader(open(f"{d}/frozen-frozen-{cfg}-n{n}.csv")))
    except OSError as e:
        out.append(f"{cfg}: no CSV ({e.strerror})")
        continue
    for ra, rb in zip(a, b):
        if ra["status"] != "ok" or rb["status"] != "ok":
            out.append(f"{cfg} {ra['dtype']}: {ra['status']} / {rb['status']}")
            continue
        ta, tb = float(ra["median_ms"]), float(rb["median_ms"])
        text = f"{cfg} {ra['dtype']}: built {ta:.3f} ms, frozen {tb:.3f} ms ({tb / ta:.2f}x; {rb.get('plan') or '?'})"
        keys = (("feature_map", "features"), ("block_states", "states"), ("prefix", "prefix"), ("output", "output"))
        def ms(r, k):
            try:
                return float(r.get(k + "_ms") or 0)
            except ValueError:
                return 0.0
        if ra["kind"] == "polysketch" and all(ms(ra, k) > 0 and ms(rb, k) > 0 for k, _ in keys):
            text += " [" + ", ".join(f"{name} {ms(ra, k):.3f} -> {ms(rb, k):.3f}" for k, name in keys) + "]"
        out.append(text)
print("; ".join(out))
PY
)
    say "$( ((rc == 0)) && echo OK || echo FAIL) frozen n=$n h=$h H=$heads (built -> frozen): $cmp"
    # The compiler's register counts (where the driver reports them) of the same plans, built ->
    # frozen, kernel by kernel in plan order.
    say "frozen registers (built -> frozen): $(python3 - "$dir/plan-built.txt" "$dir/plan-frozen.txt" <<'PY'
import re, sys
def stats(path):
    out = []
    try:
        for line in open(path, errors="replace"):
            if line.startswith("# stats: "):
                variant = line.split()[2]
                m = re.search(r"Register Count = (\d+)", line, re.I)
                out.append((variant, m.group(1) if m else "?"))
    except OSError:
        pass
    return out
a, b = stats(sys.argv[1]), stats(sys.argv[2])
seen, parts = set(), []
for (va, ra), (vb, rb) in zip(a, b):
    key = (va, ra, rb)
    if va == vb and key not in seen:
        seen.add(key)
        parts.append(f"{va} {ra} -> {rb}")
print("; ".join(parts) if parts else "none reported")
PY
)"
    return "$rc"
}

# psk tune (docs/PERFORMANCE.md, "Tuning"): the planner's tunable tile choices timed for the headline
# shapes (PSK_GPU_TUNE_SHAPES, f16, H heads, p = 4, b = 256, local exact, causal) within
# PSK_GPU_TUNE_BUDGET seconds (35; 15 with --quick; less where the step's limit is shorter). The
# table (tune/tuning.tuning) and the plan it gives at h = 64 go into the results; to build it into
# the library, commit it as tuning/devices/<device>.tuning. The bench after it keeps the library's
# built-in table unless PSK_GPU_BENCH_TABLE=tuned (merge_tuned_tables).
do_tune() {
    local shapes budget rc
    shapes=${PSK_GPU_TUNE_SHAPES:-$( ((quick)) && echo 1000:h64 || echo 32k:h64,128k:h64,32k:h128)}
    budget=${PSK_GPU_TUNE_BUDGET:-$( ((quick)) && echo 15 || echo 35)}
    # Room for the context, the model's runs of the last class and the plan: 25 s of the step's
    # limit, and the softmax baseline's tiling after it (PSK_GPU_TUNE_SOFTMAX_BUDGET, 25 s: the
    # FlashAttention-2 table's 14 entries at ~1-2 s each, resident).
    local soft_budget=${PSK_GPU_TUNE_SOFTMAX_BUDGET:-$( ((quick)) && echo 5 || echo 25)}
    local room=$((step_end - SECONDS - 25 - soft_budget - 10))
    ((budget > room)) && budget=$room
    ((budget < 5)) && budget=5
    mkdir -p "$work/tune"
    local table="$work/tune/tuning.tuning"
    tmo "$((budget + 20))" "$PSK" tune --shapes "$shapes" --heads "$heads" --dtype f16 --budget-s "$budget" --out "$table" \
        >"$work/tune/tune.txt" 2>&1
    rc=$?
    cat "$work/tune/tune.txt"
    if [[ -f "$table" ]]; then
        PSK_TUNING_TABLE="$table" PSK_PIPELINE_STATISTICS=1 tmo 20 "$PSK" info --plan --dtype f16 --local-exact --heads "$heads" \
            --kv-heads "$heads" >"$work/tune/plan-tuned.txt" 2>&1
        say "$( ((rc == 0)) && echo OK || echo FAIL) tune ($shapes, budget ${budget} s): $(tail -1 "$work/tune/tune.txt" | cut -c 1-300); $(table_entries "$table") entries in tune/tuning.tuning; applied to the h = 64 plan: $(grep -c 'from tuning table' "$work/tune/plan-tuned.txt") kernel(s)"
    else
        say "FAIL tune ($shapes): no table written (exit $rc): $(tail -1 "$work/tune/tune.txt" | cut -c 1-300)"
        ((rc == 0)) && rc=1
    fi
    # The FlashAttention-2 softmax kernel's tiling (baselines.tile) at 32k h = 64.
    local soft_shapes=${PSK_GPU_TUNE_SOFTMAX_SHAPES:-$( ((quick)) && echo 1000:h64 || echo 32k:h64)} src=0
    if ((step_end - SECONDS > soft_budget + 10)); then
        tmo "$((soft_budget + 15))" "$PSK" tune --kind softmax --shapes "$soft_shapes" --heads "$heads" --dtype f16 \
            --budget-s "$soft_budget" --out "$work/tune/softmax.tuning" >"$work/tune/tune-softmax.txt" 2>&1 || src=$?
        cat "$work/tune/tune-softmax.txt"
        say "$( ((src == 0)) && echo OK || echo FAIL) tune softmax ($soft_shapes, budget ${soft_budget} s): $(tail -1 "$work/tune/tune-softmax.txt" | cut -c 1-300)"
        ((src != 0 && rc == 0)) && rc=$src
    else
        say "SKIP tune softmax: no time left in the step"
    fi
    # The FP32 FlashAttention-2 kernel's tiling (baselines.fp32_tile; its 7 entries, those that fit)
    # at 32k h = 64 in float32 storage.
    local fp32_budget=${PSK_GPU_TUNE_FP32_BUDGET:-$( ((quick)) && echo 5 || echo 20)} frc=0
    if ((step_end - SECONDS > fp32_budget + 10)); then
        tmo "$((fp32_budget + 15))" "$PSK" tune --kind softmax --shapes "$soft_shapes" --heads "$heads" --dtype f32 \
            --budget-s "$fp32_budget" --out "$work/tune/softmax-fp32.tuning" >"$work/tune/tune-softmax-fp32.txt" 2>&1 || frc=$?
        cat "$work/tune/tune-softmax-fp32.txt"
        say "$( ((frc == 0)) && echo OK || echo FAIL) tune softmax f32 ($soft_shapes, budget ${fp32_budget} s): $(tail -1 "$work/tune/tune-softmax-fp32.txt" | cut -c 1-300)"
        ((frc != 0 && rc == 0)) && rc=$frc
    else
        say "SKIP tune softmax f32: no time left in the step"
    fi
    merge_tuned_tables
    return "$rc"
}

# The entry lines of a tuning table (neither comments, blank lines, nor its two header lines).
table_entries() { grep -cv '^\(#\|psk-tuning\|device\|$\)' "$1"; }

# tune/tuned-all.tuning: the entries of this run's psk tune tables in one (each table's entries
# are measured against the model's configuration, parameters of different kernels, so none repeats
# another), for PSK_GPU_BENCH_TABLE=tuned; the library parses it (psk info --plan) before it is kept.
merge_tuned_tables() {
    local out="$work/tune/tuned-all.tuning" tables=()
    local t
    for t in tuning softmax softmax-fp32; do [[ -s "$work/tune/$t.tuning" ]] && tables+=("$work/tune/$t.tuning"); done
    ((${#tables[@]})) || return 0
    python3 - "$out" "${tables[@]}" <<'PY'
import sys
out, first, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(first).read().rstrip("\n") + "\n"
for path in rest:
    text += "\n# entries of " + path.rsplit("/", 1)[-1] + "\n"
    for line in open(path):
        word = line.split("#", 1)[0].split()
        if word and word[0] not in ("psk-tuning", "device"):
            text += line if line.endswith("\n") else line + "\n"
open(out, "w").write(text)
PY
    if PSK_TUNING_TABLE="$out" PSK_PIPELINE_STATISTICS=1 tmo 20 "$PSK" info --plan --dtype f16 --local-exact --heads "$heads" --kv-heads "$heads" \
        >"$work/tune/plan-tuned-all.txt" 2>&1; then
        say "OK tuned tables merged: tune/tuned-all.tuning ($(table_entries "$out") entries)"
    else
        say "FAIL tuned tables merged: the library refused tune/tuned-all.tuning: $(tail -1 "$work/tune/plan-tuned-all.txt" | cut -c 1-200)"
        rm -f "$out"
    fi
}
