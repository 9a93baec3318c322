#!/usr/bin/env bash
# The one script for a session that has a device machine (an NVIDIA H100/H200 lent through the
# device tool, see /work/.library/device/README.md): conformance on the real GPU, then psk bench
# for polysketch and softmax, then PyTorch SDPA on the same GPU, results under $OUT.
#
# The device machine has PyTorch, CMake and the NVIDIA driver but no glslc, Vulkan headers or
# GoogleTest, so the binaries are built here and carried, stripped, in build-device/ (ignored by
# .gitignore's /build*/), together with the Vulkan loader as .debs in .gl/.
#
# Here (the development machine), once per build:
#   tools/gpu_run.sh pack [BUILD_DIR]     # default build-coop; strips binaries into build-device/
#   tools/gpu_run.sh fetch-loader         # libvulkan1 and friends into .gl/ (the README's recipe)
# On the device machine, one `run` call per group of phases, each call under 10 minutes, with
# carry: [".gl", "build-device"], e.g.
#   tools/gpu_run.sh device info conformance
#   tools/gpu_run.sh device bench-polysketch
#   tools/gpu_run.sh device bench-softmax torch
# Phases: info, conformance, bench-polysketch, bench-softmax, torch (or all). Every call leaves
# $OUT/gpu_run-<phases>.log and $OUT/gpu_run-<phases>.tar.gz (JSON, CSV and logs of its phases):
# two files, well inside what comes back from $OUT.
#
# Environment (device): PSK_N (context lengths, default 1k..128k), PSK_TOKENS (batch x heads x n
# per call, default 1048576), PSK_HEADS (default 8), PSK_RUNS / PSK_WARMUP (default 5 / 2),
# PSK_SOFTMAX_MAX_N (largest n for the quadratic softmax kernel, default 131072),
# PSK_PHASE_TIMEOUT (seconds per bench invocation, default 240), PSK_COMPARE_SCALAR=1 (also bench
# r=64, h=128 with PSK_DISABLE_COOPMAT=1, for when the forward uses cooperative matrices).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

die() {
    echo "gpu_run.sh: $*" >&2
    exit 1
}

# ------------------------------------------------------------------------------------------------
# Development machine.
# ------------------------------------------------------------------------------------------------

tests_to_carry=(conformance_baselines_test conformance_polysketch_test polysketch_units_test
                block_scan_test api_misuse_test validation_test coopmat_selection_test)

pack() {
    local build=${1:-build-coop}
    [[ -x "$build/tools/psk" ]] || die "no $build/tools/psk: build first (cmake --build $build)"
    rm -rf build-device
    mkdir -p build-device/bin build-device/lib
    local t
    for t in "${tests_to_carry[@]}"; do
        [[ -x "$build/tests/$t" ]] || die "missing $build/tests/$t"
        strip --strip-debug -o "build-device/bin/$t" "$build/tests/$t"
    done
    strip --strip-debug -o build-device/bin/psk "$build/tools/psk"
    strip --strip-debug -o build-device/lib/libpolysketch.so.0 "$build/lib/libpolysketch.so.0"
    git rev-parse HEAD >build-device/COMMIT
    git status --short >build-device/STATUS
    du -sh build-device
}

fetch_loader() {
    # The README's recipe: the loaders as amd64 .debs, unpacked on the device in every call.
    mkdir -p .gl /tmp/amd64/partial
    local o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
    apt-get "${o[@]}" update
    (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
    ls -l .gl
}

# ------------------------------------------------------------------------------------------------
# Device machine.
# ------------------------------------------------------------------------------------------------

work=/tmp/gpu_run
log() { echo "[$(date +%H:%M:%S)] $*"; }

setup_device() {
    [[ -n "${OUT:-}" ]] || die "OUT is not set: this part runs on the device machine"
    [[ -d build-device/bin ]] || die "no build-device/: run 'tools/gpu_run.sh pack' here and carry build-device"
    compgen -G ".gl/*.deb" >/dev/null || die "no .gl/*.deb: run 'tools/gpu_run.sh fetch-loader' and carry .gl"
    local f
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    if ! ls /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json >/dev/null 2>&1; then
        export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
        export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    fi
    export LD_LIBRARY_PATH="$repo/build-device/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export PSK_TOOLS_DIR="$repo/tools"
    mkdir -p "$work"
}

psk_bin() { "$repo/build-device/bin/psk" "$@"; }

phase_info() {
    nvidia-smi || true
    psk_bin info
    cat build-device/COMMIT build-device/STATUS
}

phase_conformance() {
    local t rc=0
    for t in "${tests_to_carry[@]}"; do
        log "$t"
        "build-device/bin/$t" --gtest_brief=1 --gtest_output="xml:$work/$t.xml" || rc=1
    done
    return "$rc"
}

# batch = tokens / (heads * n), at least 1.
batch_for() { local n=$1; local b=$((PSK_TOKENS / (PSK_HEADS * n))); echo $((b > 0 ? b : 1)); }

to_tokens() {
    local item=$1
    if [[ "$item" == *k ]]; then echo $((${item%k} * 1024)); else echo "$item"; fi
}

bench() {  # bench NAME N ARGS...: one psk bench invocation, JSON and CSV under $work
    local name=$1 n=$2
    shift 2
    local b
    b=$(batch_for "$n")
    log "psk bench $name n=$n batch=$b"
    timeout "$PSK_PHASE_TIMEOUT" "$repo/build-device/bin/psk" bench --n "$n" --batch "$b" --heads "$PSK_HEADS" \
        --runs "$PSK_RUNS" --warmup "$PSK_WARMUP" --json "$work/$name-n$n.json" --csv "$work/$name-n$n.csv" "$@" ||
        log "psk bench $name n=$n ended with status $?"
}

phase_bench_polysketch() {
    local item n
    for item in ${PSK_N//,/ }; do
        n=$(to_tokens "$item")
        bench polysketch "$n" --kinds polysketch --degree 4 --sketch-size 32,64 --block-size 256 --local-exact \
            --head-dim 64,128 --dtype f16
        # Once the forward takes the cooperative-matrix path: the same shape on the scalar path.
        [[ "$PSK_COMPARE_SCALAR" == 1 ]] || continue
        PSK_DISABLE_COOPMAT=1 bench polysketch-scalar "$n" --kinds polysketch --degree 4 --sketch-size 64 \
            --block-size 256 --local-exact --head-dim 128 --dtype f16
    done
}

phase_bench_softmax() {
    local item n
    for item in ${PSK_N//,/ }; do
        n=$(to_tokens "$item")
        if ((n > PSK_SOFTMAX_MAX_N)); then
            log "softmax n=$n skipped (PSK_SOFTMAX_MAX_N=$PSK_SOFTMAX_MAX_N)"
            continue
        fi
        bench softmax "$n" --kinds softmax --head-dim 64,128 --dtype f16
    done
}

phase_torch() {
    python3 "$repo/tools/torch_peer_cuda.py" --out "$work/torch-sdpa-f16.json" --n "$PSK_N" \
        --tokens "$PSK_TOKENS" --heads "$PSK_HEADS" --head-dim 64,128 --dtype f16
}

run_phases() {
    local p rc=0
    for p in "$@"; do
        log "phase $p"
        case "$p" in
            info) phase_info || rc=1 ;;
            conformance) phase_conformance || rc=1 ;;
            bench-polysketch) phase_bench_polysketch || rc=1 ;;
            bench-softmax) phase_bench_softmax || rc=1 ;;
            torch) phase_torch || rc=1 ;;
            *) log "unknown phase $p"; rc=1 ;;
        esac
    done
    log "done, status $rc"
    return "$rc"
}

device() {
    local phases=("$@")
    ((${#phases[@]} > 0)) || phases=(all)
    if [[ "${phases[0]}" == all ]]; then phases=(info conformance bench-polysketch bench-softmax torch); fi
    : "${PSK_N:=1k,2k,4k,8k,16k,32k,64k,128k}" "${PSK_TOKENS:=1048576}" "${PSK_HEADS:=8}"
    : "${PSK_RUNS:=5}" "${PSK_WARMUP:=2}" "${PSK_SOFTMAX_MAX_N:=131072}" "${PSK_PHASE_TIMEOUT:=240}"
    : "${PSK_COMPARE_SCALAR:=0}"
    export PSK_N PSK_COMPARE_SCALAR PSK_TOKENS PSK_HEADS PSK_RUNS PSK_WARMUP PSK_SOFTMAX_MAX_N PSK_PHASE_TIMEOUT
    setup_device
    local tag rc=0
    tag=$(IFS=-; echo "${phases[*]}")
    run_phases "${phases[@]}" > >(tee "$OUT/gpu_run-$tag.log") 2>&1 || rc=$?
    tar -C "$work" -czf "$OUT/gpu_run-$tag.tar.gz" .
    return "$rc"
}

case "${1:-}" in
    pack) shift; pack "$@" ;;
    fetch-loader) fetch_loader ;;
    device) shift; device "$@" ;;
    *) die "usage: $0 pack [BUILD_DIR] | fetch-loader | device [PHASE...]" ;;
esac
