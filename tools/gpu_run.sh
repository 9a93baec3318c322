#!/usr/bin/env bash
# The GPU check of polysketch, one command per phase, for any Linux machine with a Vulkan GPU (it
# was written for NVIDIA H100 / H200 class GPUs; it needs python3 and no network). Everything it
# runs is built and packed beforehand by tools/gpu_prepare.sh into .gpu/ (psk, libpolysketch, the
# GPU test binaries, the validation layer's .deb, the fixture); a machine without a Vulkan loader
# gets it from the .debs in .gl/ (gpu_prepare.sh fetches them too). Copy the working tree with .gl
# and .gpu to the GPU machine and run one phase there; docs/GPU_RUN.md says how to read the output.
# The step functions live in tools/gpu_run/*.sh, which this script sources.
#
#   tools/gpu_run.sh gpu    [options]   everything in one command, inside --deadline (480 s), most
#                                       important first: setup, psk info (+ the kernel plan),
#                                       psk conformance --full (JSON), the fixture comparisons (1
#                                       and 16 heads), the bisect matrix (below), the GPU test
#                                       binaries, psk tune, the bench (device-resident, f16 and
#                                       f32, n = 4k..128k, h = 64, the SM clock logged), the
#                                       frozen specializations (each kernel as built and frozen by
#                                       spirv-opt) and the stage proxies (the walking block states
#                                       on / off); each step's
#                                       time is capped and cut to what is left
#   tools/gpu_run.sh check  [options]   setup, psk conformance --full (--quick with --quick), psk
#                                       info, psk demo f32/f16, the fixture comparisons, the
#                                       conformance, unit and decode tests under the validation layer
#   tools/gpu_run.sh bisect [options]   setup, psk info, the bisect matrix alone: psk conformance
#                                       --quick, psk info --plan and the fixture at 1 head once per
#                                       setting of PSK_COOPMAT_BACKEND / _STAGES / _FEATURE_TERMS
#                                       (PSK_COOPMAT_SELFTEST=0), plus the library's defaults
#   tools/gpu_run.sh bench  [options]   setup, psk info, the psk bench sweep (device-resident, f16,
#                                       B=1, H=16, h=64/128, n=4k..128k, polysketch r=32/64 local
#                                       exact b=256, softmax), the stage proxies at 32k
#   tools/gpu_run.sh peer   [options]   setup, torch_peer_cuda.py (ceilings, SDPA by backend, the
#                                       softmax decode step), psk bench --decode, tinylm bench
#                                       (the sample model, polysketch vs softmax, 1k..32k prompts)
#   tools/gpu_run.sh all    [options]   check, bench and peer in turn (longer than one --deadline at
#                                       the default sizes: for --quick runs)
#
# Options:
#   --out DIR        results folder (default: $OUT when set, else /tmp/psk-gpu-results/PHASE-TIME)
#   --bin DIR        the packed binaries (default .gpu)
#   --lavapipe       run on lavapipe, Mesa's CPU Vulkan driver (PSK_DEVICE=llvmpipe, the loader
#                    already installed, no nvidia-smi): the harness' own test on a machine without
#                    a GPU; rows and steps that need the GPU's features say so and go on
#   --quick          small sizes everywhere (with --lavapipe: the whole harness in a few minutes)
#   --validation     the tests under the validation layer (the default, but for the gpu phase)
#   --no-validation  the tests without it (the default of the gpu phase)
#   --deadline S     seconds for the whole command (default 480 for gpu, 560 for the other phases,
#                    so that a run ends, results packed, inside 10 minutes); steps are cut to fit
#                    and a step that has no time left is skipped
#   --jobs N         test binaries run at once (default 4; 2 with --lavapipe)
#
# Results: three files in the results folder, rewritten as the run goes (a command cut off keeps
# what was measured before): gpu_run-PHASE.summary (one line per step, the same lines as stdout),
# gpu_run-PHASE.log (everything, appended live), gpu_run-PHASE.tar.gz (every step's files: psk info,
# plans, JSON/CSV, the bisect rows, the SM clock log, test XML and logs, the torch peer's JSON
# lines; re-packed after each step from a work folder made fresh for the command).
# Exit status: 0 when every step passed, 1 when a step failed or was cut, 2 for a bad command line.
#
# Environment (defaults in brackets; the gpu phase's own defaults after a slash):
# PSK_GPU_HEADS [16], PSK_GPU_BENCH_N [4k,8k,16k,32k,64k,128k / 4k,16k,32k,64k,128k],
# PSK_GPU_HEAD_DIMS [64,128 / 64], PSK_GPU_SKETCH [32,64 / 32], PSK_GPU_BENCH_KINDS [polysketch,softmax],
# PSK_GPU_BENCH_DTYPES [f16 / f16,f32: polysketch's storage types; softmax runs f16],
# PSK_GPU_RUNS [5], PSK_GPU_WARMUP [2], PSK_GPU_WARMUP_MS [1000: the least warm-up per bench row],
# PSK_GPU_RESIDENT [1: psk bench --resident; 0: host-form calls], PSK_GPU_HOST_RUNS [3],
# PSK_GPU_NVIDIA_SMI [nvidia-smi; empty: no clock log], PSK_GPU_CLOCK_MS [100],
# PSK_GPU_BISECT [every row; a comma list of row names picks some], PSK_GPU_BISECT_ROW_LIMIT [30 s;
# 120 with --lavapipe],
# PSK_GPU_FIXTURE_TOL [2e-3], PSK_GPU_FIXTURE_TOL32 [2e-4], PSK_GPU_TEST_LIMIT [60 / 40 s per test; 90 with --lavapipe],
# PSK_GPU_DECODE_CONTEXT [4k,32k,128k], PSK_GPU_SKIP [none; a comma list of step names
# (conformance, bisect, tests, tune, frozen, ...) not to run: their time goes to the steps after them],
# PSK_GPU_BENCH_TABLE [built-in: the library's own table; tuned: the bench reads this run's psk tune
# tables, merged (tune/tuned-all.tuning), where the tune step wrote them].
# The library's switches (PSK_COOPMAT_BACKEND, _STAGES, _SELFTEST, _FEATURE_TERMS;
# docs/GPU_RUN.md) pass through, except where the bisect sets them.
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
case "$phase" in gpu | check | bisect | bench | peer | all) ;; -h | --help | help) usage ;; *) echo "gpu_run.sh: unknown phase '$phase'" >&2; usage ;; esac

out_dir="" bin_dir="$repo/.gpu" lavapipe=0 quick=0 validation="" deadline_s="" jobs=""
while (($#)); do
    case "$1" in
        --out) out_dir=$2; shift 2 ;;
        --bin) bin_dir=$(cd "$2" && pwd) || exit 2; shift 2 ;;
        --lavapipe) lavapipe=1; shift ;;
        --quick) quick=1; shift ;;
        --validation) validation=1; shift ;;
        --no-validation) validation=0; shift ;;
        --deadline) deadline_s=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        -h | --help) usage ;;
        *) echo "gpu_run.sh: unknown option '$1'" >&2; usage ;;
    esac
done
[[ -n "$jobs" ]] || jobs=$((lavapipe ? 2 : 4))
[[ -n "$validation" ]] || validation=$([[ $phase == gpu ]] && echo 0 || echo 1)
[[ -n "$deadline_s" ]] || deadline_s=$([[ $phase == gpu ]] && echo 480 || echo 560)
[[ "$deadline_s" =~ ^[0-9]+$ ]] || { echo "gpu_run.sh: --deadline takes seconds" >&2; exit 2; }

results=${out_dir:-${OUT:-/tmp/psk-gpu-results/$phase-$(date +%Y%m%d-%H%M%S)}}
mkdir -p "$results" || exit 2
results=$(cd "$results" && pwd)
work=$(mktemp -d /tmp/gpu_run-work.XXXXXX)       # what the tarball holds: this command's files only
scratch=$(mktemp -d /tmp/gpu_run-scratch.XXXXXX) # large files (tiled fixture inputs and outputs)
clock_pid=""
cleanup() {
    [[ -n "$clock_pid" ]] && kill "$clock_pid" 2>/dev/null
    rm -rf "$scratch"
}
trap cleanup EXIT
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
bench_dtypes=${PSK_GPU_BENCH_DTYPES:-f16}
runs=${PSK_GPU_RUNS:-5}
warmup=${PSK_GPU_WARMUP:-2}
warmup_ms=${PSK_GPU_WARMUP_MS:-1000}
resident=${PSK_GPU_RESIDENT:-1}
host_runs=${PSK_GPU_HOST_RUNS:-3}
test_limit=${PSK_GPU_TEST_LIMIT:-60}
fixture_tol=${PSK_GPU_FIXTURE_TOL:-2e-3}
fixture_tol32=${PSK_GPU_FIXTURE_TOL32:-2e-4}
decode_context=${PSK_GPU_DECODE_CONTEXT:-4k,32k,128k}
bisect_rows=${PSK_GPU_BISECT:-}
bisect_row_limit=${PSK_GPU_BISECT_ROW_LIMIT:-$( ((lavapipe)) && echo 120 || echo 30)}
clock_ms=${PSK_GPU_CLOCK_MS:-100}
# nvidia-smi for the SM clock log: found in PATH on a GPU run; none with --lavapipe unless named.
if [[ -n "${PSK_GPU_NVIDIA_SMI+set}" ]]; then
    nvidia_smi=$PSK_GPU_NVIDIA_SMI
elif ((lavapipe)); then
    nvidia_smi=""
else
    nvidia_smi=$(command -v nvidia-smi || true)
fi
demo_n=2048 demo_heads=4 demo_runs=3 tile_heads=16
if [[ $phase == gpu ]]; then
    bench_n=${PSK_GPU_BENCH_N:-4k,16k,32k,64k,128k}
    head_dims=${PSK_GPU_HEAD_DIMS:-64}
    sketches=${PSK_GPU_SKETCH:-32}
    bench_dtypes=${PSK_GPU_BENCH_DTYPES:-f16,f32}
    test_limit=${PSK_GPU_TEST_LIMIT:-40}
    # lavapipe on a cold Mesa shader cache compiles every kernel of a case for seconds: there
    # polysketch_units_test ran 93 s (25 warm) and an emulated FeatureMap16 case was cut at 40,
    # so the harness' own test allows 90 per test.
    ((lavapipe)) && test_limit=${PSK_GPU_TEST_LIMIT:-90}
fi
if ((quick)); then
    heads=${PSK_GPU_HEADS:-2}
    bench_n=${PSK_GPU_BENCH_N:-512,1000}
    head_dims=${PSK_GPU_HEAD_DIMS:-64}
    runs=${PSK_GPU_RUNS:-2}
    warmup=${PSK_GPU_WARMUP:-1}
    warmup_ms=${PSK_GPU_WARMUP_MS:-300}
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

# skipped NAME: whether PSK_GPU_SKIP names the step.
skipped() { [[ ",${PSK_GPU_SKIP:-}," == *",$1,"* ]]; }

# step NAME LIMIT FUNCTION: runs FUNCTION in this shell (its exports stay) with its output appended
# to $work/NAME.log and, live, to the log; records a failure; packs the results afterwards.
step() {
    local name=$1 limit=$2 fn=$3 rc
    local left=$((deadline - SECONDS))
    if skipped "$name"; then
        say "SKIP $name: named in PSK_GPU_SKIP"
        return 0
    fi
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

# The binaries: bin/, lib/ and tests/ under $bin_dir, or gpu_prepare.sh's one xz tarball of them
# (binaries.tar.xz, ~135 MiB of binaries in ~5 MiB) unpacked into $scratch (outside $work, whose
# files are the results; removed at exit) with Python's tarfile (no xz binary needed on the GPU
# machine).
bin_root="$bin_dir"
if [[ ! -x "$bin_dir/bin/psk" && -f "$bin_dir/binaries.tar.xz" ]]; then
    if python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bin_dir/binaries.tar.xz" "$scratch"; then
        bin_root="$scratch"
    else
        echo "gpu_run: could not unpack $bin_dir/binaries.tar.xz" >&2
    fi
fi
PSK="$bin_root/bin/psk"
TESTS="$bin_root/tests"
# spirv-opt and spirv-val for the frozen step (tools/freeze_shaders.py), packed the same way.
SPIRV_TOOLS="$bin_dir/spirv-tools"
if [[ ! -d "$SPIRV_TOOLS" && -f "$bin_dir/spirv-tools.tar.xz" ]]; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bin_dir/spirv-tools.tar.xz" "$scratch" ||
        echo "gpu_run: could not unpack $bin_dir/spirv-tools.tar.xz" >&2
    SPIRV_TOOLS="$scratch/spirv-tools"
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
        say "FAIL setup: no $PSK (run tools/gpu_prepare.sh on the build machine and copy .gpu along)"
        return 1
    fi
    export LD_LIBRARY_PATH="$bin_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PSK_TOOLS_DIR="$repo/tools"
    local loader="system" want
    if ((lavapipe)); then
        export PSK_DEVICE=llvmpipe
        want=llvmpipe
    else
        # The device: PSK_DEVICE when the caller set it, else the NVIDIA GPU where nvidia-smi
        # exists, else the library's choice among the GPUs (discrete first).
        if [[ -n "${PSK_DEVICE:-}" ]]; then
            want=$PSK_DEVICE
        elif command -v nvidia-smi >/dev/null || [[ -n "$nvidia_smi" ]]; then
            export PSK_DEVICE=nvidia
            want=NVIDIA
        else
            unset PSK_DEVICE
            want="(discrete|integrated|virtual) GPU"
        fi
        if [[ -n "$nvidia_smi" ]]; then
            tmo 20 "$nvidia_smi" >"$work/nvidia-smi.txt" 2>&1
            tmo 20 "$nvidia_smi" --query-gpu=name,driver_version,pstate,clocks.sm,clocks.max.sm,clocks.mem,power.draw,temperature.gpu,memory.used,memory.total --format=csv >>"$work/nvidia-smi.txt" 2>&1
            cat "$work/nvidia-smi.txt"
        fi
        # (grep without -q: with pipefail, -q's early exit can kill ldconfig with SIGPIPE)
        if ! have_loader; then
            # A machine without the loader (a bare GPU image): the .debs of .gl unpacked into /,
            # which needs root; elsewhere install libvulkan1.
            if ((EUID != 0)); then
                say "FAIL setup: no Vulkan loader (libvulkan.so.1): install libvulkan1, or run as root to unpack .gl/*.deb into /"
                return 1
            fi
            if ! compgen -G "$repo/.gl/*.deb" >/dev/null; then
                say "FAIL setup: no Vulkan loader and no .gl/*.deb (tools/gpu_prepare.sh fetches them; copy .gl along)"
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
    local icd="default" candidates=() tried=() c
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
    # The validation layer: the packed .deb unpacked under /tmp/psk-vvl (not into /).
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
            if [[ -n "$deb" ]]; then vmsg="on (packed $(basename "$deb"))"; else vmsg="on (the system's layer)"; fi
        else
            vmsg="UNAVAILABLE (validation_test failed with PSK_REQUIRE_VALIDATION=1: see validation-probe.log); tests run without it"
            unset VK_LAYER_PATH
        fi
        cat "$work/validation-probe.log" 2>/dev/null | tail -5
    fi
    {
        echo "PSK_DEVICE=${PSK_DEVICE:-}"
        echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}"
        echo "VK_LAYER_PATH=${VK_LAYER_PATH:-}"
        echo "PSK_REQUIRE_VALIDATION=${PSK_REQUIRE_VALIDATION:-}"
        echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
        echo "maxStorageBufferRange=$lim_range maxMemoryAllocationSize=$lim_alloc deviceLocalMiB=$lim_mem_mib"
    } | tee "$work/env.txt"
    # The library's run-time switches as the caller left them (the bisect sets its own).
    local v
    for v in PSK_COOPMAT_BACKEND PSK_COOPMAT_STAGES PSK_COOPMAT_SELFTEST PSK_COOPMAT_FEATURE_TERMS PSK_DISABLE_COOPMAT PSK_COOPMAT_EMULATION; do
        [[ -n "${!v+set}" ]] && echo "$v=${!v} (from the caller's environment)"
    done
    say "OK setup: device ${device_line#*] } (loader: $loader, ICD: $icd); validation: $vmsg; maxStorageBufferRange $lim_range, maxMemoryAllocationSize $lim_alloc, $lim_mem_mib MiB"
}


# ------------------------------------------------------------------------------------------------
# The SM clock log: nvidia-smi in the background for the whole command (after setup), one line
# per PSK_GPU_CLOCK_MS; the bench matches its rows' timed spans against it (tools/gpu_run/bench.sh).
# Started outside any step: a background job inside a step would hold the step's output pipe.
# ------------------------------------------------------------------------------------------------

clock_log="$work/clocks.csv" clock_fields="" clock_note="not logged"
start_clock_log() {
    if [[ -z "$nvidia_smi" ]]; then
        clock_note="not logged: no nvidia-smi$( ((lavapipe)) && echo ' (--lavapipe)')"
        return 0
    fi
    # clocks_event_reasons is the newer drivers' name of clocks_throttle_reasons.
    local f
    for f in timestamp,clocks.sm,clocks.max.sm,clocks_event_reasons.active timestamp,clocks.sm,clocks.max.sm,clocks_throttle_reasons.active \
        timestamp,clocks.sm,clocks.max.sm; do
        if timeout 20 "$nvidia_smi" --query-gpu="$f" --format=csv,noheader,nounits >"$work/clocks-probe.txt" 2>&1; then
            clock_fields=$f
            break
        fi
    done
    if [[ -z "$clock_fields" ]]; then
        clock_note="not logged: $nvidia_smi --query-gpu=...clocks.sm... failed ($(head -c 200 "$work/clocks-probe.txt"))"
        say "NOTE clock log: $clock_note"
        return 0
    fi
    echo "$clock_fields" >"$clock_log"
    # Line-buffered where stdbuf exists, so that the file is current while the bench reads it.
    local buf=()
    command -v stdbuf >/dev/null && buf=(stdbuf -oL)
    "${buf[@]}" "$nvidia_smi" --query-gpu="$clock_fields" --format=csv,noheader,nounits -lms "$clock_ms" \
        >>"$clock_log" 2>"$work/clocks.err" </dev/null &
    clock_pid=$!
    clock_note="logged every ${clock_ms} ms ($clock_fields) in clocks.csv"
    say "clock log: $nvidia_smi --query-gpu=$clock_fields -lms $clock_ms in the background (clocks.csv)"
}

# ------------------------------------------------------------------------------------------------
# The steps (each file defines do_* functions; see there).
# ------------------------------------------------------------------------------------------------

for part in check bisect bench peer; do
    # shellcheck source=/dev/null
    source "$repo/tools/gpu_run/$part.sh" || { echo "gpu_run.sh: cannot read tools/gpu_run/$part.sh" >&2; exit 2; }
done

phase_gpu() {
    # Correctness first; the caps add up to less than the deadline so that the bench keeps at
    # least ~80 s; a step that ends early leaves its time to the next ones.
    # (With --lavapipe, the harness' own test, the fixture, bisect and tests get more: lavapipe
    # compiles every kernel for seconds, the emulated ones for a minute, on a cold shader cache.)
    # info: 17 s with the driver's shader cache warm, past 30 cold (the fourth run's first call
    # lost the FA-2 tilings' plans to a 30 s cap); 5 plans more since (the row groups 8 and 4, Z staged).
    step info 65 do_info
    step conformance 120 do_conformance
    step fixture $( ((lavapipe)) && echo 90 || echo 40) do_fixture
    step bisect $( ((lavapipe)) && echo 240 || echo 90) do_bisect
    # PSK_GPU_TESTS_LIMIT: the tests step's cap (23 binaries, 4 at a time: 90 s cut nine of them).
    step tests "${PSK_GPU_TESTS_LIMIT:-$( ((lavapipe)) && echo 150 || echo 90)}" do_tests
    # The tune step takes what the bench, the frozen step and the stages can spare: at most 90 s,
    # and never the bench's 85 s, the frozen step's 80 s nor the stages' 100 s at the end (those
    # of them PSK_GPU_SKIP names keep nothing).
    local reserve=0
    skipped bench || reserve=$((reserve + 85))
    skipped ablations || reserve=$((reserve + 90))
    skipped frozen || reserve=$((reserve + 80))
    skipped stages || reserve=$((reserve + 100))
    local tune_limit=$((deadline - SECONDS - reserve))
    ((tune_limit > 90)) && tune_limit=90
    if ((tune_limit >= 25)); then
        step tune "$tune_limit" do_tune
    else
        say "SKIP tune: ${tune_limit} s left before the bench's share"
    fi
    # The bench keeps the last 270 s: 90 for the generic kernels' ablations, 80 for the frozen
    # specializations (each kernel as built and as spirv-opt freezes it), 100 for the stage proxies
    # (the stages' variants, the FP32 and chunked softmax, the cooperative ablations, the walking
    # block states on / off).
    local after_bench=0
    skipped ablations || after_bench=$((after_bench + 90))
    skipped frozen || after_bench=$((after_bench + 80))
    skipped stages || after_bench=$((after_bench + 100))
    local bench_limit=$((deadline - SECONDS - after_bench))
    ((bench_limit < 60)) && bench_limit=$((deadline - SECONDS))
    step bench "$bench_limit" do_bench
    # The generic kernels' ablations (90 s: 21 calls at 32k), right after the bench while the clock is up.
    local ablations_limit=$((deadline - SECONDS))
    skipped frozen || ablations_limit=$((ablations_limit - 80))
    skipped stages || ablations_limit=$((ablations_limit - 100))
    ((ablations_limit > 90)) && ablations_limit=90
    ((ablations_limit >= 20)) && step ablations "$ablations_limit" do_ablations
    # (With --lavapipe 140 s: its frozen modules' pipelines compile for seconds each, and the
    # fixture runs them at n = 16461 after the benches.)
    local frozen_limit=$((deadline - SECONDS - 100)) frozen_cap=$( ((lavapipe)) && echo 140 || echo 80)
    ((frozen_limit > frozen_cap)) && frozen_limit=$frozen_cap
    ((frozen_limit >= 30)) && step frozen "$frozen_limit" do_frozen
    ((deadline - SECONDS >= 20)) && step stages $((deadline - SECONDS)) do_stages
}
phase_check() {
    step conformance 150 do_conformance
    step info 30 do_info
    step demo 60 do_demo
    step fixture 120 do_fixture
    step tests 200 do_tests
}
phase_bisect() {
    step info 30 do_info
    step bisect $((deadline - SECONDS)) do_bisect
}
phase_bench() {
    step info 30 do_info
    step bench 330 do_bench
    step stages 90 do_stages
}
phase_peer() {
    # torch takes at most 200 s and leaves the decode and tinylm steps at least 70 s.
    local torch_limit=$((deadline - SECONDS - 70))
    ((torch_limit > 200)) && torch_limit=200
    ((torch_limit < 30)) && torch_limit=30
    step torch "$torch_limit" do_torch
    step decode 120 do_decode
    step tinylm 200 do_tinylm
}

say "gpu_run.sh $phase$( ((lavapipe)) && echo ' --lavapipe')$( ((quick)) && echo ' --quick'): results in $results, deadline ${deadline_s}s"
if step setup 40 do_setup; then
    start_clock_log
    case "$phase" in
        gpu) phase_gpu ;;
        check) phase_check ;;
        bisect) phase_bisect ;;
        bench) phase_bench ;;
        peer) phase_peer ;;
        all) phase_check; phase_bench; phase_peer ;;
    esac
fi
if [[ -n "$clock_pid" ]]; then
    kill "$clock_pid" 2>/dev/null
    wait "$clock_pid" 2>/dev/null
    clock_pid=""
fi
pack
if ((${#failed_steps[@]})); then
    say "DONE $phase in $((SECONDS - start))s: FAILED steps: ${failed_steps[*]} (details: $(basename "$LOG"), $(basename "$TAR"))"
    exit 1
fi
say "DONE $phase in $((SECONDS - start))s: every step passed ($(basename "$SUMMARY"), $(basename "$LOG"), $(basename "$TAR"))"
exit 0
