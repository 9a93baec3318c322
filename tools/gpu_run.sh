#!/usr/bin/env bash
# The GPU check of polysketch in one command per phase, for a session lent an NVIDIA H100/H200
# through the device tool (docs/GPU_RUN.md says which calls to make; /work/.library/device/ has the
# machine's facts). Everything it runs was built and packed here by tools/gpu_prepare.sh into .gpu/
# (psk, libpolysketch, the GPU test binaries, the validation layer's .deb, the fixture); the Vulkan
# loader travels as .debs in .gl/. Carry [".gl", ".gpu"].
#
#   tools/gpu_run.sh check  [options]   setup, psk conformance --full (--quick with --quick; every
#                                       kernel path against the float64 reference, JSON), psk info
#                                       (+ the kernel plan), psk demo f32/f16, the fixture
#                                       comparisons (1 head and 16 heads), the conformance, unit and
#                                       decode tests under the validation layer
#   tools/gpu_run.sh bench  [options]   setup, psk info, the psk bench sweep (f16, B=1, H=16,
#                                       h=64/128, n=4k..128k, polysketch r=32/64 local exact b=256,
#                                       softmax), the stage proxies at 32k
#   tools/gpu_run.sh peer   [options]   setup, torch_peer_cuda.py (ceilings, SDPA by backend, the
#                                       softmax decode step), psk bench --decode, tinylm bench
#                                       (the sample model, polysketch vs softmax, 1k..32k prompts)
#   tools/gpu_run.sh all    [options]   the three in turn (more than one 10-minute call holds at the
#                                       default sizes: for --quick runs)
#
# Options:
#   --out DIR        results folder (default: $OUT on the device machine, else
#                    /tmp/psk-gpu-results/PHASE-TIME)
#   --bin DIR        the packed binaries (default .gpu)
#   --lavapipe       run on lavapipe (PSK_DEVICE=llvmpipe, the loader installed here, no nvidia-smi):
#                    the harness' own test before a lease
#   --quick          small sizes everywhere (with --lavapipe: the whole harness in a few minutes)
#   --no-validation  the tests without the validation layer
#   --deadline S     seconds for the whole command (default 560: the device tool stops a command at
#                    600); steps are cut to fit and a step that has no time left is skipped
#   --jobs N         test binaries run at once (default 4; 2 with --lavapipe)
#
# Results: three files in the results folder, rewritten as the run goes (a command cut off keeps
# what was measured before): gpu_run-PHASE.summary (one line per step, the same lines as stdout),
# gpu_run-PHASE.log (everything, appended live), gpu_run-PHASE.tar.gz (every step's files: psk info,
# plans, JSON/CSV, test XML and logs, the torch peer's JSON lines; re-packed after each step from a
# fresh work folder, so a warm machine never re-packs an earlier call's results).
# Exit status: 0 when every step passed, 1 when a step failed or was cut, 2 for a bad command line.
#
# Environment (defaults in brackets): PSK_GPU_HEADS [16], PSK_GPU_BENCH_N [4k,8k,16k,32k,64k,128k],
# PSK_GPU_HEAD_DIMS [64,128], PSK_GPU_SKETCH [32,64], PSK_GPU_BENCH_KINDS [polysketch,softmax],
# PSK_GPU_RUNS [5], PSK_GPU_WARMUP [2], PSK_GPU_FIXTURE_TOL32 [2e-4],
# PSK_GPU_TEST_LIMIT [60 s per test], PSK_GPU_FIXTURE_TOL [2e-3], PSK_GPU_DECODE_CONTEXT [4k,32k,128k].
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo" || exit 2

usage() {
    sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

phase=${1:-}
[[ -n "$phase" ]] || usage
shift
case "$phase" in check | bench | peer | all) ;; -h | --help | help) usage ;; *) echo "gpu_run.sh: unknown phase '$phase'" >&2; usage ;; esac

out_dir="" bin_dir="$repo/.gpu" lavapipe=0 quick=0 validation=1 deadline_s=560 jobs=""
while (($#)); do
    case "$1" in
        --out) out_dir=$2; shift 2 ;;
        --bin) bin_dir=$(cd "$2" && pwd) || exit 2; shift 2 ;;
        --lavapipe) lavapipe=1; shift ;;
        --quick) quick=1; shift ;;
        --no-validation) validation=0; shift ;;
        --deadline) deadline_s=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        -h | --help) usage ;;
        *) echo "gpu_run.sh: unknown option '$1'" >&2; usage ;;
    esac
done
[[ -n "$jobs" ]] || jobs=$((lavapipe ? 2 : 4))

results=${out_dir:-${OUT:-/tmp/psk-gpu-results/$phase-$(date +%Y%m%d-%H%M%S)}}
mkdir -p "$results" || exit 2
results=$(cd "$results" && pwd)
work=$(mktemp -d /tmp/gpu_run-work.XXXXXX)       # what the tarball holds: this call's files only
scratch=$(mktemp -d /tmp/gpu_run-scratch.XXXXXX) # large files (tiled fixture inputs and outputs)
trap 'rm -rf "$scratch"' EXIT
LOG="$results/gpu_run-$phase.log"
SUMMARY="$results/gpu_run-$phase.summary"
TAR="$results/gpu_run-$phase.tar.gz"
: >"$LOG"
: >"$SUMMARY"
rm -f "$TAR"
exec 3>&1 # the caller's stdout: summary lines only; step output goes to the log

start=$SECONDS
deadline=$((start + deadline_s))
step_end=$deadline
failed_steps=()

# Sizes and knobs.
heads=${PSK_GPU_HEADS:-16}
bench_n=${PSK_GPU_BENCH_N:-4k,8k,16k,32k,64k,128k}
head_dims=${PSK_GPU_HEAD_DIMS:-64,128}
sketches=${PSK_GPU_SKETCH:-32,64}
bench_kinds=${PSK_GPU_BENCH_KINDS:-polysketch,softmax}
runs=${PSK_GPU_RUNS:-5}
warmup=${PSK_GPU_WARMUP:-2}
test_limit=${PSK_GPU_TEST_LIMIT:-60}
fixture_tol=${PSK_GPU_FIXTURE_TOL:-2e-3}
fixture_tol32=${PSK_GPU_FIXTURE_TOL32:-2e-4}
decode_context=${PSK_GPU_DECODE_CONTEXT:-4k,32k,128k}
demo_n=2048 demo_heads=4 demo_runs=3 tile_heads=16
if ((quick)); then
    heads=${PSK_GPU_HEADS:-2}
    bench_n=${PSK_GPU_BENCH_N:-512,1000}
    head_dims=${PSK_GPU_HEAD_DIMS:-64}
    runs=${PSK_GPU_RUNS:-2}
    warmup=${PSK_GPU_WARMUP:-1}
    decode_context=${PSK_GPU_DECODE_CONTEXT:-1k,2k}
    demo_n=256 demo_heads=2 demo_runs=1 tile_heads=2
fi

# ------------------------------------------------------------------------------------------------
# Plumbing.
# ------------------------------------------------------------------------------------------------

# say TEXT: one summary line to the caller, the summary file and the log.
say() {
    local line
    line=$(printf '[%3ds] %s' "$((SECONDS - start))" "$*")
    printf '%s\n' "$line" >&3
    printf '%s\n' "$line" >>"$SUMMARY"
    printf '%s\n' "$line" >>"$LOG"
}

# show: stdin (a table) to the caller, the summary file and the log, as they are.
show() {
    local line
    while IFS= read -r line; do
        printf '%s\n' "$line" >&3
        printf '%s\n' "$line" >>"$SUMMARY"
        printf '%s\n' "$line" >>"$LOG"
    done
}

# tmo LIMIT CMD...: CMD under `timeout`, LIMIT cut to the step's end and the deadline; 124 when cut.
tmo() {
    local limit=$1
    shift
    local left=$((step_end < deadline ? step_end - SECONDS : deadline - SECONDS))
    ((limit > left)) && limit=$left
    if ((limit < 1)); then
        echo "no time left for: $*"
        return 124
    fi
    timeout -k 5 "$limit" "$@"
}

pack() {
    tar -C "$work" -czf "$TAR.tmp" . 2>/dev/null && mv -f "$TAR.tmp" "$TAR"
}

# step NAME LIMIT FUNCTION: runs FUNCTION in this shell (its exports stay) with its output appended
# to $work/NAME.log and, live, to the log; records a failure; packs the results afterwards.
step() {
    local name=$1 limit=$2 fn=$3 rc
    local left=$((deadline - SECONDS))
    if ((left < 3)); then
        say "SKIP $name: the deadline (${deadline_s}s) has passed"
        failed_steps+=("$name(skipped)")
        return 1
    fi
    ((limit > left)) && limit=$left
    step_end=$((SECONDS + limit))
    printf '\n===== %s (limit %ss) =====\n' "$name" "$limit" >>"$LOG"
    "$fn" > >(tee -a "$work/$name.log" >>"$LOG") 2>&1
    rc=$?
    wait $! 2>/dev/null # the tee of the process substitution
    step_end=$deadline
    if ((rc != 0)); then
        failed_steps+=("$name")
        ((SECONDS >= deadline - 1)) && say "NOTE $name ran into the deadline"
    fi
    pack
    return "$rc"
}

to_tokens() {
    local item=${1,,}
    if [[ "$item" == *k ]]; then echo $((${item%k} * 1024)); else echo "$item"; fi
}

list() { # comma list with k suffixes -> space-separated integers
    local item
    for item in ${1//,/ }; do to_tokens "$item"; done | tr '\n' ' '
}

PSK="$bin_dir/bin/psk"
TESTS="$bin_dir/tests"
# gpu_prepare.sh packs the test binaries as one xz tarball (the 64 MiB carry limit): unpacked into
# $scratch (outside $work, which travels back; removed at exit), with Python's tarfile (no xz
# binary needed on the device).
if [[ ! -d "$TESTS" && -f "$bin_dir/tests.tar.xz" ]]; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bin_dir/tests.tar.xz" "$scratch" ||
        echo "gpu_run: could not unpack $bin_dir/tests.tar.xz" >&2
    TESTS="$scratch/tests"
fi
FIXTURE="$bin_dir/fixture"
compare="$repo/tools/compare_npy.py"

# ------------------------------------------------------------------------------------------------
# Setup: the loader, the driver (ICD), the device, the validation layer.
# ------------------------------------------------------------------------------------------------

device_line="" # "[i] NAME (TYPE)" of the device psk runs on
lim_range=0 lim_alloc=0 lim_mem_mib=0

read_limits() { # from psk info's block of the selected device
    local info=$1 pattern=$2
    device_line=$(grep -iE "^\[[0-9]+\] .*${pattern}" "$info" | head -1)
    [[ -n "$device_line" ]] || return 1
    local block
    block=$(awk -v want="$device_line" '$0 == want {on = 1; next} /^\[[0-9]+\] / {on = 0} on' "$info")
    lim_range=$(sed -n 's/.*maxStorageBufferRange: *\([0-9]*\).*/\1/p' <<<"$block" | head -1)
    lim_alloc=$(sed -n 's/.*maxMemoryAllocationSize: *\([0-9]*\).*/\1/p' <<<"$block" | head -1)
    lim_mem_mib=$(sed -n 's/.*device-local memory: *\([0-9]*\).*/\1/p' <<<"$block" | head -1)
    : "${lim_range:=0}" "${lim_alloc:=0}" "${lim_mem_mib:=0}"
}

have_loader() { ldconfig -p 2>/dev/null | grep 'libvulkan\.so\.1 ' >/dev/null; }

do_setup() {
    echo "date: $(date -u +%FT%TZ); host: $(uname -a)"
    echo "repo: $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo '?')"
    [[ -f "$bin_dir/MANIFEST" ]] && { cp "$bin_dir/MANIFEST" "$work/MANIFEST"; cat "$bin_dir/MANIFEST"; }
    if [[ ! -x "$PSK" ]]; then
        say "FAIL setup: no $PSK (run tools/gpu_prepare.sh here and carry .gpu)"
        return 1
    fi
    export LD_LIBRARY_PATH="$bin_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PSK_TOOLS_DIR="$repo/tools"
    local loader="system"
    if ((lavapipe)); then
        export PSK_DEVICE=llvmpipe
    else
        export PSK_DEVICE=nvidia
        if command -v nvidia-smi >/dev/null; then
            tmo 20 nvidia-smi >"$work/nvidia-smi.txt" 2>&1
            tmo 20 nvidia-smi --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,memory.used,memory.total --format=csv >>"$work/nvidia-smi.txt" 2>&1
            cat "$work/nvidia-smi.txt"
        fi
        # (grep without -q: with pipefail, -q's early exit can kill ldconfig with SIGPIPE)
        if ! have_loader; then
            if [[ -z "${OUT:-}" ]]; then
                say "FAIL setup: no Vulkan loader; .gl is unpacked into / only on the device machine (\$OUT set)"
                return 1
            fi
            if ! compgen -G "$repo/.gl/*.deb" >/dev/null; then
                say "FAIL setup: no Vulkan loader and no .gl/*.deb (tools/gpu_prepare.sh fetches them; carry .gl)"
                return 1
            fi
            local f
            for f in "$repo"/.gl/*.deb; do dpkg -x "$f" / || echo "dpkg -x $f failed"; done
            ldconfig
            loader=".gl"
        fi
        if ! have_loader; then
            say "FAIL setup: libvulkan.so.1 still missing after unpacking .gl"
            return 1
        fi
    fi
    # The driver: psk info must list the device. If not, name the NVIDIA ICD file explicitly.
    local want icd="default" candidates=() tried=() c
    want=$( ((lavapipe)) && echo llvmpipe || echo NVIDIA)
    tmo 30 "$PSK" info >"$work/psk-info.txt" 2>&1
    if ! read_limits "$work/psk-info.txt" "$want"; then
        ((lavapipe)) || candidates=(/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/share/vulkan/icd.d/nvidia_icd.json
            /etc/vulkan/icd.d/nvidia_icd.json $(find /usr/local/nvidia /usr/share/vulkan /etc/vulkan /usr/lib/x86_64-linux-gnu \
                -maxdepth 4 -name 'nvidia_icd*.json' 2>/dev/null))
        for c in "${candidates[@]}"; do
            [[ -f "$c" ]] || continue
            [[ " ${tried[*]} " == *" $c "* ]] && continue
            tried+=("$c")
            echo "trying VK_DRIVER_FILES=$c"
            VK_DRIVER_FILES=$c tmo 30 "$PSK" info >"$work/psk-info.txt" 2>&1
            if read_limits "$work/psk-info.txt" "$want"; then
                export VK_DRIVER_FILES=$c VK_ICD_FILENAMES=$c
                export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
                icd=$c
                break
            fi
        done
    fi
    cat "$work/psk-info.txt"
    if [[ -z "$device_line" ]]; then
        say "FAIL setup: psk info lists no $want device (loader: $loader; the default ICD search, then VK_DRIVER_FILES with: ${tried[*]:-no nvidia_icd*.json found}); see psk-info.txt"
        return 1
    fi
    # The validation layer: the carried .deb unpacked outside / (the device README's advice).
    local vmsg="off (--no-validation)"
    unset PSK_REQUIRE_VALIDATION
    if ((validation)); then
        local deb
        deb=$(compgen -G "$bin_dir/vvl/*.deb" | head -1)
        if [[ -n "$deb" ]]; then
            rm -rf /tmp/psk-vvl && mkdir -p /tmp/psk-vvl && dpkg -x "$deb" /tmp/psk-vvl
            export VK_LAYER_PATH=/tmp/psk-vvl/usr/share/vulkan/explicit_layer.d
            export LD_LIBRARY_PATH="/tmp/psk-vvl/usr/lib/x86_64-linux-gnu:$LD_LIBRARY_PATH"
        fi
        if [[ -x "$TESTS/validation_test" ]] &&
            PSK_REQUIRE_VALIDATION=1 tmo 60 "$TESTS/validation_test" >"$work/validation-probe.log" 2>&1; then
            export PSK_REQUIRE_VALIDATION=1
            if [[ -n "$deb" ]]; then vmsg="on (carried $(basename "$deb"))"; else vmsg="on (the system's layer)"; fi
        else
            vmsg="UNAVAILABLE (validation_test failed with PSK_REQUIRE_VALIDATION=1: see validation-probe.log); tests run without it"
            unset VK_LAYER_PATH
        fi
        cat "$work/validation-probe.log" 2>/dev/null | tail -5
    fi
    {
        echo "PSK_DEVICE=$PSK_DEVICE"
        echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}"
        echo "VK_LAYER_PATH=${VK_LAYER_PATH:-}"
        echo "PSK_REQUIRE_VALIDATION=${PSK_REQUIRE_VALIDATION:-}"
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
        echo "maxStorageBufferRange=$lim_range maxMemoryAllocationSize=$lim_alloc deviceLocalMiB=$lim_mem_mib"
    } | tee "$work/env.txt"
    say "OK setup: device ${device_line#*] } (loader: $loader, ICD: $icd); validation: $vmsg; maxStorageBufferRange $lim_range, maxMemoryAllocationSize $lim_alloc, $lim_mem_mib MiB"
}

# ------------------------------------------------------------------------------------------------
# check: conformance, info, demo, fixture, tests.
# ------------------------------------------------------------------------------------------------

# psk conformance: the test suite's sweep on the device through the installed-style binary, every
# kernel path it runs (generic, cooperative where it has cooperative matrices, lane-team on
# lavapipe), each case against the float64 reference. Without the validation layer: the tests
# step runs under it, and the carried layer's age shows up as messages (see docs/GPU_RUN.md).
do_conformance() {
    local rc=0 mode=--full
    ((quick)) && mode=--quick
    tmo 150 env -u PSK_VALIDATION "$PSK" conformance "$mode" --json "$work/conformance.json" >"$work/conformance.txt" 2>&1 || rc=$?
    cat "$work/conformance.txt"
    local line
    line=$(python3 - "$work/conformance.json" <<'PY'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except (OSError, ValueError) as e:
    print(f"no JSON ({e})")
    sys.exit(0)
s = d["summary"]
worst = ", ".join(f"{t} {w['error']:.2e}/{w['threshold']:.2g}" for t, w in s["worst"].items())
paths = ", ".join(p["name"] + ("" if p["status"] == "ran" else " skipped") for p in d["paths"])
failed = [f"{c['name']} [{c['path']}]" for c in d["cases"] if c["status"] == "fail"]
print(f"{s['cases']} cases: {s['passed']} passed, {s['failed']} failed, {s['skipped']} skipped in {s['seconds']:.0f}s; "
      f"worst {worst}; paths: {paths}" + (f"; failed: {', '.join(failed[:5])}" if failed else ""))
PY
)
    say "$( ((rc == 0)) && echo OK || echo FAIL) conformance $mode: exit $rc$( ((rc == 124)) && echo ' (time limit)'): $line (conformance.json)"
    return "$rc"
}

do_info() {
    local dev driver coop rc=0
    dev=$(awk -v want="$device_line" '$0 == want {on = 1; next} /^\[[0-9]+\] / {on = 0} on' "$work/psk-info.txt")
    driver=$(sed -n 's/^ *driver: *//p' <<<"$dev" | head -1)
    coop=$(sed -n 's/^ *cooperative matrix: *//p' <<<"$dev" | head -1)
    : >"$work/plan.txt"
    local h r
    for h in ${head_dims//,/ }; do
        for r in ${sketches//,/ }; do
            echo "--- polysketch f16 causal local-exact p=4 r=$r b=256 h=$h H=$heads" >>"$work/plan.txt"
            tmo 20 "$PSK" info --plan --kind polysketch --dtype f16 --causal --local-exact --degree 4 --sketch-size "$r" \
                --block-size 256 --head-dim "$h" --heads "$heads" >>"$work/plan.txt" 2>&1 || rc=1
        done
        echo "--- softmax f16 causal h=$h H=$heads" >>"$work/plan.txt"
        tmo 20 "$PSK" info --plan --kind softmax --dtype f16 --causal --head-dim "$h" --heads "$heads" >>"$work/plan.txt" 2>&1 || rc=1
    done
    cat "$work/plan.txt"
    local kinds
    kinds=$(grep -oE '\((generic|team|cooperative)\)' "$work/plan.txt" | sort | uniq -c | awk '{printf "%s%s x%s", sep, $2, $1; sep=", "}')
    if ((rc)); then
        say "FAIL info: psk info --plan failed (plan.txt); driver $driver, cooperative matrix: $coop"
        return 1
    fi
    say "OK info: driver $driver; cooperative matrix: $coop; kernels planned: $kinds (plan.txt)"
}

do_demo() {
    local dtype rc=0 tol
    for dtype in f32 f16; do
        tol=$([[ $dtype == f32 ]] && echo 1e-4 || echo 3e-3)
        tmo 60 "$PSK" demo --n "$demo_n" --heads "$demo_heads" --dim 64 --dtype "$dtype" --runs "$demo_runs" \
            >"$work/demo-$dtype.txt" 2>&1
        local st=$?
        cat "$work/demo-$dtype.txt"
        local line
        line=$(awk -v tol="$tol" -v st="$st" '
            /^softmax +[0-9]/ {s = $2; se = $4} /^polynomial \(p=/ {p = $3; pe = $5} /^polysketch \(p=/ {k = $4; ke = $6}
            END {
                ok = (st == 0 && se != "" && pe != "" && se + 0 <= tol && pe + 0 <= tol) ? "OK" : "FAIL"
                printf "%s softmax %s ms (err %s), poly %s ms (err %s), polysketch %s ms (approx. err %s); tol %s, exit %s",
                       ok, s, se, p, pe, k, ke, tol, st
            }' "$work/demo-$dtype.txt")
        [[ "$line" == OK* ]] || rc=1
        say "${line%% *} demo $dtype n=$demo_n H=$demo_heads: ${line#* }"
    done
    return "$rc"
}

# fixture_case NAME KIND N HEADS DTYPE TOL ARGS...: psk run on the fixture (tiled to HEADS heads
# when > 1) in DTYPE storage and the comparison with lavapipe's float32-storage output.
fixture_case() {
    local name=$1 kind=$2 n=$3 h=$4 dtype=$5 tol=$6
    shift 6
    local dir="$FIXTURE/$kind-n$n" q k v want out rc
    if [[ ! -f "$dir/expected.npy" ]]; then
        say "FAIL fixture $name: no $dir/expected.npy (tools/gpu_prepare.sh makes it)"
        return 1
    fi
    want="$dir/expected.npy"
    # Fewer heads where the device's limits refuse 16 in one call (lavapipe: 128 MiB per binding).
    local why note=""
    while ((h > 1)); do
        why=$(why_too_large "$kind" "$n" "$h" 64 32)
        [[ -z "$why" ]] && break
        note=" (tiled to $((h / 2)) heads: $h do not fit: $why)"
        h=$((h / 2))
    done
    name=${name%-H*}-H$h-$dtype
    if ((h == 1)); then
        q="$dir/q.npy" k="$dir/k.npy" v="$dir/v.npy"
    else
        q="$scratch/q.npy" k="$scratch/k.npy" v="$scratch/v.npy"
        tmo 60 python3 "$compare" tile-heads "$dir/q.npy" "$q" --heads "$h" &&
            tmo 60 python3 "$compare" tile-heads "$dir/k.npy" "$k" --heads "$h" &&
            tmo 60 python3 "$compare" tile-heads "$dir/v.npy" "$v" --heads "$h" --roll || {
            say "FAIL fixture $name: could not tile the inputs"
            return 1
        }
    fi
    out="$scratch/out-$name.npy"
    rm -f "$out"
    local t0=$SECONDS
    tmo 60 "$PSK" run --kind "$kind" --q "$q" --k "$k" --v "$v" --out "$out" --dtype "$dtype" "$@" >"$scratch/run.txt" 2>&1
    rc=$?
    cat "$scratch/run.txt"
    if ((rc != 0)); then
        say "FAIL fixture $name: psk run exit $rc$( ((rc == 124)) && echo ' (time limit)'): $(tail -1 "$scratch/run.txt" | cut -c1-300)"
        return 1
    fi
    local res
    res=$(tmo 90 python3 "$compare" compare "$out" "$want" --tol "$tol" --label "$name" \
        --json "$work/fixture.jsonl" $( ((h > 1)) && echo --heads-rolled))
    rc=$?
    echo "$res"
    say "${res:-FAIL fixture $name: compare_npy.py exit $rc} [psk run + compare $((SECONDS - t0))s]$note"
    rm -f "$out"
    return "$rc"
}

do_fixture() {
    local rc=0 ps=(--sketch-size 32 --block-size 256 --local-exact --degree 4 --seed 0)
    [[ -f "$FIXTURE/README" ]] && cat "$FIXTURE/README"
    fixture_case polysketch-n16461-H1-f16 polysketch 16461 1 f16 "$fixture_tol" "${ps[@]}" || rc=1
    fixture_case polysketch-n16461-H1-f32 polysketch 16461 1 f32 "$fixture_tol32" "${ps[@]}" || rc=1
    fixture_case softmax-n4093-H1-f16 softmax 4093 1 f16 "$fixture_tol" || rc=1
    fixture_case softmax-n4093-H1-f32 softmax 4093 1 f32 "$fixture_tol32" || rc=1
    fixture_case "polysketch-n16461-H$tile_heads-f16" polysketch 16461 "$tile_heads" f16 "$fixture_tol" "${ps[@]}" || rc=1
    fixture_case "softmax-n4093-H$tile_heads-f16" softmax 4093 "$tile_heads" f16 "$fixture_tol" || rc=1
    rm -f "$scratch"/*.npy
    return "$rc"
}

# The test runner: binaries in parallel, each test under a time limit (a hung or crashed test is
# recorded and the binary restarted on the tests it has not run yet).
write_runner() {
    cat >"$work/gtest_runner.py" <<'PY'
import json, os, queue, re, signal, subprocess, sys, threading, time
from concurrent.futures import ThreadPoolExecutor

spec = json.loads(sys.argv[1])
out_dir, jobs, per_test, total = spec["out_dir"], spec["jobs"], spec["per_test"], spec["total"]
deadline = time.monotonic() + total
RUN = re.compile(r"^\[ RUN      \] (\S+)")
END = re.compile(r"^\[\s+(OK|FAILED|SKIPPED)\s+\] ([^\s,]+)(?:, where .*)? \(\d+ ms\)")
lock = threading.Lock()

def say(text):
    with lock:
        print(text, flush=True)

def run_binary(entry):
    label, binary = entry["label"], entry["bin"]
    env = dict(os.environ, **entry.get("env", {}))
    results, order = {}, []
    log_path = os.path.join(out_dir, f"{label}.log")
    t0 = time.monotonic()
    attempt = 0
    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        while True:
            attempt += 1
            args = [binary, "--gtest_color=no", f"--gtest_output=xml:{os.path.join(out_dir, f'{label}.{attempt}.xml')}"]
            if results:
                args.append("--gtest_filter=-" + ":".join(results))
            log.write(f"### attempt {attempt}: {' '.join(args[:3])} ({len(results)} tests excluded)\n")
            log.flush()
            if time.monotonic() > deadline:
                break
            p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, start_new_session=True, text=True, errors="replace")
            lines = queue.Queue()
            threading.Thread(target=lambda: ([lines.put(l) for l in p.stdout], lines.put(None)), daemon=True).start()
            current, since, killed, ran_any = None, 0.0, None, False
            while True:
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    line = ""
                if line is None:
                    break
                if line:
                    log.write(line)
                    m = RUN.match(line)
                    if m:
                        current, since, ran_any = m.group(1), time.monotonic(), True
                        order.append(current)
                    m = END.match(line)
                    if m:
                        results[m.group(2)] = m.group(1).lower()
                        current = None
                now = time.monotonic()
                if current and now - since > per_test:
                    killed = "timeout"
                elif now > deadline:
                    killed = "deadline"
                if killed:
                    try:
                        os.killpg(p.pid, signal.SIGKILL)
                    except OSError:
                        pass
                    break
            rc = p.wait()
            log.write(f"### attempt {attempt} ended: exit {rc}{', killed: ' + killed if killed else ''}\n")
            log.flush()
            if killed == "deadline":
                if current:
                    results[current] = "cut (step time limit)"
                break
            if killed == "timeout":
                results[current] = f"timeout (> {per_test} s)"
                continue
            if current:  # the process died inside a test
                results[current] = f"crash (exit {rc})"
                continue
            if rc != 0 and not ran_any and not results:
                results["<binary>"] = f"exit {rc} before any test"
            break
    elapsed = time.monotonic() - t0
    counts = {}
    for s in results.values():
        key = s.split(" ")[0]
        counts[key] = counts.get(key, 0) + 1
    bad = {n: s for n, s in results.items() if s not in ("ok", "skipped")}
    text = open(log_path, encoding="utf-8", errors="replace").read()
    validation_msgs = text.count("validation message:")
    ok = not bad and results
    detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    worst = "; ".join(f"{n}: {s}" for n, s in list(bad.items())[:6]) + (" ..." if len(bad) > 6 else "")
    say(f"{'OK' if ok else 'FAIL'} test {label}: {detail or 'nothing ran'} in {elapsed:.1f}s"
        + (f", {validation_msgs} validation messages" if validation_msgs else "") + (f" -- {worst}" if worst else ""))
    return {"label": label, "bin": binary, "env": entry.get("env", {}), "seconds": elapsed, "counts": counts,
            "failures": bad, "validation_messages": validation_msgs, "ok": bool(ok)}

with ThreadPoolExecutor(max_workers=jobs) as pool:
    reports = list(pool.map(run_binary, spec["binaries"]))
with open(os.path.join(out_dir, "tests.json"), "w", encoding="utf-8") as f:
    json.dump(reports, f, indent=1)
sys.exit(0 if all(r["ok"] for r in reports) else 1)
PY
}

do_tests() {
    write_runner
    mkdir -p "$work/tests"
    # Highest value first (the pool starts them in this order); the CPU-only tests stay here.
    local entries=() t
    local order=(conformance_polysketch_test conformance_baselines_test decode_test polysketch_units_test block_scan_test
        api_misuse_test embed_test threads_test coopmat_range_test team_kernels_test)
    for t in "${order[@]}"; do
        [[ -x "$TESTS/$t" ]] && entries+=("{\"label\": \"$t\", \"bin\": \"$TESTS/$t\"}")
    done
    # The cooperative-matrix kernels through their emulated backend (as CTest's coopmat_emulated. prefix).
    # Both take minutes on lavapipe (CTest runs them here): only on the GPU.
    if ((lavapipe)); then
        local keep=() e
        for e in "${entries[@]}"; do [[ "$e" == *coopmat_range_test* ]] || keep+=("$e"); done
        entries=("${keep[@]}")
    else
        [[ -x "$TESTS/conformance_polysketch_test" ]] && entries+=("{\"label\": \"conformance_polysketch_test.coopmat_emulated\", \"bin\": \"$TESTS/conformance_polysketch_test\", \"env\": {\"PSK_COOPMAT_EMULATION\": \"1\"}}")
    fi
    if ((${#entries[@]} == 0)); then
        say "FAIL tests: no test binaries in $TESTS"
        return 1
    fi
    local left=$((step_end - SECONDS - 5))
    local joined
    joined=$(IFS=,; echo "${entries[*]}")
    local spec="{\"out_dir\": \"$work/tests\", \"jobs\": $jobs, \"per_test\": $test_limit, \"total\": $left, \"binaries\": [$joined]}"
    echo "$spec" >"$work/tests/spec.json"
    say "tests: ${#entries[@]} binaries, $jobs at a time, ${test_limit}s per test, ${left}s in all, PSK_REQUIRE_VALIDATION=${PSK_REQUIRE_VALIDATION:-unset}"
    # The runner prints one summary line per binary: to the caller too.
    tmo $((left + 4)) python3 "$work/gtest_runner.py" "$spec" | while IFS= read -r line; do say "$line"; done
    local rc=${PIPESTATUS[0]}
    ((rc == 0)) && say "OK tests: every binary passed" || say "FAIL tests: exit $rc (tests/*.log, tests/tests.json)"
    return "$rc"
}

# ------------------------------------------------------------------------------------------------
# bench: the sweep, split or skipped where one call does not fit the device's limits.
# ------------------------------------------------------------------------------------------------

# why_too_large KIND N H h R: the reason a call of B=1, H heads does not fit (empty when it fits),
# from the library's workspace layout (lib/forward/polysketch_forward.cpp polysketchWorkspace, p = 4
# local exact, b = 256; lib/forward/tiled_forward.cpp for softmax above 8192 tokens) and the limits.
why_too_large() {
    local kind=$1 n=$2 H=$3 h=$4 r=${5:-0} b=256 two32=$((1 << 32))
    local range=$lim_range alloc=$lim_alloc
    ((range > 0)) || return 0
    ((alloc > 0)) || alloc=$((1 << 62))
    local tensor=$((H * n * h * 2))
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

# bench_call NAME ARGS...: one psk bench invocation (JSON, CSV and its table under $work/bench).
bench_call() {
    local name=$1 limit=$2
    shift 2
    mkdir -p "$work/bench"
    tmo "$limit" "$PSK" bench --batch 1 --runs "$runs" --warmup "$warmup" --json "$work/bench/$name.json" \
        --csv "$work/bench/$name.csv" "$@" >"$work/bench/$name.txt" 2>&1
    local rc=$?
    cat "$work/bench/$name.txt"
    return "$rc"
}

# One line per configuration of a CSV: "r=32 5.203 ms 19.0 TFLOP/s" (x SPLIT calls when split).
csv_summary() {
    python3 - "$1" "${2:-1}" <<'PY'
import csv, sys
path, split = sys.argv[1], int(sys.argv[2])
parts = []
try:
    rows = list(csv.DictReader(open(path)))
except OSError as e:
    print(f"no CSV ({e.strerror})")
    sys.exit(0)
for r in rows:
    what = f"r={r['sketch_size']}" if r["kind"] == "polysketch" else r["kind"]
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
    if split > 1:
        parts.append(f"{what} {split} calls x {ms:.3f} = {split * ms:.3f} ms ({r['heads']} heads each), {tf:.1f} TFLOP/s{stages}")
    else:
        parts.append(f"{what} {ms:.3f} ms, {float(r['ms_per_token']) * 1e3:.4f} us/token, {tf:.1f} TFLOP/s{stages}")
print("; ".join(parts) if parts else "no rows")
PY
}

# bench_group KIND N h: polysketch (every fitting sketch size in one call; a sketch size that does not
# fit H heads runs as H/s calls of H/s heads) or softmax, at one n and head dim.
bench_group() {
    local kind=$1 n=$2 h=$3 name="$1-h$3-n$2" limit=$4 rc=0 r why fit=() s sub
    [[ ",$bench_kinds," == *",$kind,"* ]] || return 0
    local common=(--n "$n" --head-dim "$h" --dtype f16)
    if [[ $kind == softmax ]]; then
        why=$(why_too_large softmax "$n" "$heads" "$h")
        if [[ -n "$why" ]]; then
            say "SKIP bench $name: $why"
            return 0
        fi
        # Quadratic: fewer runs at the longest contexts so that the invocation ends inside its limit.
        local runs=$runs warmup=$warmup
        ((n > 32768 && !quick)) && runs=3 warmup=1
        bench_call "$name" "$limit" --kinds softmax --heads "$heads" "${common[@]}" || rc=$?
        say "$( ((rc == 0)) && echo OK || echo FAIL) bench $name H=$heads: $(csv_summary "$work/bench/$name.csv")$( ((rc == 124)) && echo ' [time limit]')"
        return "$rc"
    fi
    local pk=(--kinds polysketch --degree 4 --block-size 256 --local-exact)
    for r in ${sketches//,/ }; do
        why=$(why_too_large polysketch "$n" "$heads" "$h" "$r")
        if [[ -z "$why" ]]; then
            fit+=("$r")
            continue
        fi
        # Split the heads over calls (same total work; the sum of the calls is the time).
        sub=""
        for s in 2 4 8 16; do
            ((heads % s == 0 && heads / s >= 1)) || continue
            if [[ -z "$(why_too_large polysketch "$n" $((heads / s)) "$h" "$r")" ]]; then
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
        refused=$(awk -F, 'NR > 1 && $15 == "skipped" && /TOO_LARGE/ {print $12}' "$work/bench/$name.csv" 2>/dev/null)
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
    local rc=0 n h ns hs first_h
    ns=$(list "$bench_n")
    hs=${head_dims//,/ }
    first_h=${hs%% *}
    say "bench: B=1 H=$heads f16 causal, n = $ns, h = $hs, kinds $bench_kinds (polysketch p=4 r=${sketches} b=256 local exact); $runs runs after $warmup warm-up"
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
    python3 - "$work/bench" <<'PY' | tee "$work/bench/table.txt" | show
import csv, glob, os, sys
rows = []
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    if os.path.basename(path) == "all.csv":
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
def key(r):
    return "softmax" if r["kind"] == "softmax" else f"poly r={r['sketch_size']}"
cols = sorted({key(r) for r in rows}, key=lambda c: (c == "softmax", c))
cells = {}
for r in rows:
    ms = float(r["median_ms"]) * r["split"] if r["status"] == "ok" else None
    k = (int(r["head_dim"]), int(r["n"]), key(r))
    if ms is not None or not isinstance(cells.get(k), float):  # a split run's time beats a refusal
        cells[k] = ms if ms is not None else r["status"]
print("bench table (median ms, B=1, H=%s, f16, causal; split calls summed):" % max(int(r["heads"]) * r["split"] for r in rows))
print("%4s %7s " % ("h", "n") + " ".join("%12s" % c for c in cols) + "   softmax / poly r=32")
for h, n in sorted({(k[0], k[1]) for k in cells}):
    vals = [cells.get((h, n, c), "") for c in cols]
    ratio = ""
    s, p = cells.get((h, n, "softmax")), cells.get((h, n, "poly r=32"))
    if isinstance(s, float) and isinstance(p, float) and p > 0:
        ratio = "%.2fx" % (s / p)
    print("%4d %7d " % (h, n) + " ".join("%12s" % (("%.3f" % v) if isinstance(v, float) else v) for v in vals) + "   " + ratio)
stage_keys = ("feature_map_ms", "block_states_ms", "prefix_ms", "output_ms")
staged = [r for r in rows if r["kind"] == "polysketch" and r["status"] == "ok" and all(r.get(k) for k in stage_keys)]
if staged:
    print("polysketch stages (median ms of each stage; split calls summed):")
    print("%4s %7s %4s %10s %10s %10s %10s %10s" % ("h", "n", "r", "features", "states", "prefix", "output", "total"))
    for r in sorted(staged, key=lambda r: (int(r["head_dim"]), int(r["sketch_size"]), int(r["n"]))):
        v = [float(r[k]) * r["split"] for k in stage_keys]
        print("%4s %7s %4s " % (r["head_dim"], r["n"], r["sketch_size"]) + " ".join("%10.3f" % x for x in v)
              + " %10.3f" % (float(r["median_ms"]) * r["split"]))
PY
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
    local base=(--kinds polysketch --degree 4 --sketch-size 32 --block-size 256 --n "$n" --head-dim "$h" --dtype f16 --heads "$heads")
    bench_call "stage-local-exact-n$n" 60 "${base[@]}" --local-exact || rc=1
    bench_call "stage-sketched-local-n$n" 60 "${base[@]}" || rc=1
    bench_call "stage-full-n$n" 60 "${base[@]}" --full || rc=1
    # A learned sketch (a model's feature map: docs/PERFORMANCE.md predicts it the dominant stage).
    bench_call "stage-learned-n$n" 60 "${base[@]}" --local-exact --learned-sketch || rc=1
    local a b c d
    a=$(csv_summary "$work/bench/stage-local-exact-n$n.csv")
    b=$(csv_summary "$work/bench/stage-sketched-local-n$n.csv")
    c=$(csv_summary "$work/bench/stage-full-n$n.csv")
    d=$(csv_summary "$work/bench/stage-learned-n$n.csv")
    say "$( ((rc == 0)) && echo OK || echo FAIL) stages n=$n h=$h H=$heads r=32: causal local exact: $a | causal sketched local: $b | full (no scan, no local part): $c | learned sketch, local exact: $d"
    return "$rc"
}

# ------------------------------------------------------------------------------------------------
# peer: torch on the same GPU, and psk's decode step.
# ------------------------------------------------------------------------------------------------

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

do_decode() {
    local rc=0 ctx
    ctx=$(tr ' ' ',' <<<"$(list "$decode_context")" | sed 's/,$//')
    mkdir -p "$work/bench"
    # Decoding supports float32 states only (pskCreateDecodeState), so f32; one block cycle of steps.
    tmo 120 "$PSK" bench --decode --kinds polysketch,softmax --context "$ctx" --heads "$heads" --head-dim 64 \
        --dtype f32 --degree 4 --sketch-size 32,64 --block-size 256 --local-exact --warmup 4 \
        --json "$work/bench/decode.json" --csv "$work/bench/decode.csv" >"$work/bench/decode.txt" 2>&1 || rc=$?
    cat "$work/bench/decode.txt"
    local line
    line=$(python3 - "$work/bench/decode.csv" <<'PY'
import csv, sys
try:
    rows = list(csv.DictReader(open(sys.argv[1])))
except OSError:
    print("no CSV")
    sys.exit(0)
out = []
for r in rows:
    what = "polysketch r=%s" % r["sketch_size"] if r["kind"] == "polysketch" else r["kind"]
    if r["status"] == "ok":
        out.append(f"{what} L={r['context']}: {float(r['median_ms']) * 1e3:.1f} us/step ({r['steps']} steps)")
    else:
        out.append(f"{what} L={r['context']}: {r['status']}: {r['reason'][:100]}")
print("; ".join(out))
PY
)
    say "$( ((rc == 0)) && echo OK || echo FAIL) decode f32 H=$heads h=64: $line$( ((rc == 124)) && echo ' [time limit]')"
    return "$rc"
}

do_tinylm() {
    # The sample model generating after prompts of 1k..32k tokens, polysketch against the same
    # model with softmax attention (KV cache): docs/PERFORMANCE.md, "tinylm generation".
    local rc=0 m ctx=1024,4096,16384,32768 tokens=128 line=""
    ((quick)) && ctx=256,1024 && tokens=16
    [[ -x "$bin_dir/bin/tinylm" ]] || { say "SKIP tinylm: not packed"; return 0; }
    mkdir -p "$work/tinylm"
    for m in bytes_polysketch bytes_softmax; do
        local model="$repo/samples/tinylm/models/$m.safetensors"
        [[ -f "$model" ]] || continue
        tmo 150 "$bin_dir/bin/tinylm" bench "$model" --context "$ctx" --tokens "$tokens" --json "$work/tinylm/$m.json" \
            >"$work/tinylm/$m.txt" 2>&1 || rc=$?
        cat "$work/tinylm/$m.txt"
        line+="$m: $(awk -F'|' '/^\| [0-9]/ { printf "L=%d %.2f ms/token, ", $2, $5 }' "$work/tinylm/$m.txt"); "
    done
    say "$( ((rc == 0)) && echo OK || echo FAIL) tinylm bench: $line$( ((rc == 124)) && echo ' [time limit]')"
    return "$rc"
}

# ------------------------------------------------------------------------------------------------

phase_check() {
    step conformance 150 do_conformance
    step info 20 do_info
    step demo 60 do_demo
    step fixture 120 do_fixture
    step tests 200 do_tests
}
phase_bench() {
    step info 20 do_info
    step bench 330 do_bench
    step stages 90 do_stages
}
phase_peer() {
    step torch 200 do_torch
    step decode 120 do_decode
    step tinylm 200 do_tinylm
}

say "gpu_run.sh $phase$( ((lavapipe)) && echo ' --lavapipe')$( ((quick)) && echo ' --quick'): results in $results, deadline ${deadline_s}s"
if step setup 60 do_setup; then
    case "$phase" in
        check) phase_check ;;
        bench) phase_bench ;;
        peer) phase_peer ;;
        all) phase_check; phase_bench; phase_peer ;;
    esac
fi
pack
if ((${#failed_steps[@]})); then
    say "DONE $phase in $((SECONDS - start))s: FAILED steps: ${failed_steps[*]} (details: $(basename "$LOG"), $(basename "$TAR"))"
    exit 1
fi
say "DONE $phase in $((SECONDS - start))s: every step passed ($(basename "$SUMMARY"), $(basename "$LOG"), $(basename "$TAR"))"
exit 0
