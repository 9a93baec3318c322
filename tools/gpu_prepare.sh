#!/usr/bin/env bash
# Prepares, on the build machine (no GPU needed), everything tools/gpu_run.sh needs on a machine with
# a GPU, so that the GPU check is one command there (docs/GPU_RUN.md):
#
#   1. builds with tools/build.sh (build/; --build-dir DIR packs another build, --no-build skips it);
#   2. fetches the Vulkan loader .debs into .gl/ when missing (apt-get download of the amd64
#      packages, for a GPU machine without a loader) and the Khronos validation layer's .deb into
#      .gpu/vvl/;
#   3. packs into .gpu/ (ignored by .gitignore and .git/info/exclude; copied to the GPU machine
#      along with the working tree and .gl):
#      bin/psk, bin/tinylm, lib/libpolysketch.so.0 and the GPU test binaries, debug info stripped,
#      in one xz tarball (binaries.tar.xz, packed after the fixture is made with them); spirv-opt and
#      spirv-val (spirv-tools.tar.xz: .venv-build's SPIRV-Tools, which know the cooperative-matrix
#      extensions, else the system's) for the frozen step;
#   4. makes the fixture in .gpu/fixture/: seeded f16 q, k, v (B=1, H=1, h=64) at n = 16461 (not a
#      multiple of the block) for polysketch (p=4, r=32, b=256, local exact, causal, seed 0) and at
#      n = 4093 for softmax (causal), with the expected outputs computed here by psk run on lavapipe
#      with the generic kernels (PSK_DISABLE_TEAM_KERNELS=1: the kernels a GPU runs) in float32
#      storage (the function itself, so the GPU's float16 run meets the tests' 2e-3), and lavapipe's
#      own f16/f32 errors against them (generic and lane-team kernels) in fixture/README;
#   5. checks that what the GPU machine needs (the working tree's tracked and untracked-not-ignored
#      files, .gl, .gpu) stays small (it fails above 60 MiB) and prints the command to run there.
#
#   tools/gpu_prepare.sh [--build-dir DIR] [--no-build] [--new-inputs] [--test]
#     --new-inputs  draw the fixture's q, k, v again (default: keep existing inputs; the expected
#                   outputs are always recomputed, so that they come from the kernels being carried)
#     --test        afterwards, run the harness here on lavapipe: tools/gpu_run.sh gpu and peer with
#                   --lavapipe --quick (a few minutes on two cores)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

build_dir=build no_build=0 new_inputs=0 run_test=0
while (($#)); do
    case "$1" in
        --build-dir) build_dir=$2; shift 2 ;;
        --no-build) no_build=1; shift ;;
        --new-inputs) new_inputs=1; shift ;;
        --test) run_test=1; shift ;;
        -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_prepare.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done

log() { echo "gpu_prepare: $*"; }
die() { echo "gpu_prepare: $*" >&2; exit 1; }

# --- 0. Ignore the packed folders (never committed): .gitignore and .git/info/exclude.
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
for p in /.gl/ /.gpu/; do
    grep -qxF "$p" "$exclude" 2>/dev/null || echo "$p" >>"$exclude"
done
grep -qxF /.gpu/ .gitignore || die ".gitignore lacks /.gpu/ (add it: the packed folder must not be committed)"

# --- 1. Build.
if ((no_build)); then
    log "not building; packing $build_dir as it is"
elif [[ "$build_dir" == build ]]; then
    log "building build/ with tools/build.sh"
    bash tools/build.sh
else
    log "building $build_dir (cmake --build)"
    cmake --build "$build_dir" -j "$(nproc)"
fi
[[ -x "$build_dir/tools/psk" ]] || die "no $build_dir/tools/psk"

# --- 2. The loader (.gl) and the validation layer (.gpu/vvl).
apt_amd64=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
apt_updated=0
apt_update() {
    ((apt_updated)) && return 0
    mkdir -p /tmp/amd64/partial
    apt-get "${apt_amd64[@]}" update -qq
    apt_updated=1
}
if ! compgen -G ".gl/libvulkan1_*.deb" >/dev/null; then
    log "fetching the Vulkan loader .debs into .gl/ (apt-get download, amd64)"
    mkdir -p .gl
    apt_update
    (cd .gl && apt-get "${apt_amd64[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
mkdir -p .gpu/vvl
if ! compgen -G ".gpu/vvl/vulkan-validationlayers_*.deb" >/dev/null; then
    log "fetching the validation layer .deb into .gpu/vvl/"
    apt_update
    (cd .gpu/vvl && apt-get "${apt_amd64[@]}" download vulkan-validationlayers)
fi

# --- 3. Binaries, stripped of debug info.
tests=(validation_test conformance_polysketch_test conformance_baselines_test decode_test polysketch_units_test
    block_scan_test z_operands_test api_misuse_test embed_test threads_test coopmat_range_test team_kernels_test states_walk_test
    decode_dispatch_test state_passing_test coopmat_self_test_test pipeline_statistics_test shader_replacement_test)
rm -rf .gpu/bin .gpu/lib .gpu/tests .gpu/tests.tar.xz .gpu/binaries.tar.xz
mkdir -p .gpu/bin .gpu/lib .gpu/tests
strip --strip-debug -o .gpu/bin/psk "$build_dir/tools/psk"
# The sample model's app (its models are tracked files: they come with the working tree).
if [[ -x "$build_dir/samples/tinylm/tinylm" ]]; then
    strip --strip-debug -o .gpu/bin/tinylm "$build_dir/samples/tinylm/tinylm"
else
    log "WARNING: samples/tinylm not built, not packed"
fi
strip --strip-debug -o .gpu/lib/libpolysketch.so.0 "$(readlink -f "$build_dir/lib/libpolysketch.so.0")"
missing=()
for t in "${tests[@]}"; do
    if [[ -x "$build_dir/tests/$t" ]]; then
        strip --strip-debug -o ".gpu/tests/$t" "$build_dir/tests/$t"
    else
        missing+=("$t")
    fi
done
((${#missing[@]} == 0)) || log "WARNING: not built, not packed: ${missing[*]}"
# Nothing may need a library that a bare GPU machine lacks (only libvulkan comes from .gl).
bad=$(for f in .gpu/bin/* .gpu/tests/*; do LD_LIBRARY_PATH=.gpu/lib ldd "$f" | grep -vE \
    'linux-vdso|ld-linux|lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt|polysketch|vulkan)\.so' | sed "s|^|$f: |"; done || true)
[[ -z "$bad" ]] || die "unexpected shared libraries: $bad"
# spirv-opt and spirv-val for tools/freeze_shaders.py on the GPU machine (gpu_run.sh's frozen step):
# the SPIRV-Tools in .venv-build (tools/install_build_tools.sh; linked statically, and new enough
# for the KHR cooperative-matrix variants), else the system's (Debian's: the generic kernels only).
rm -rf .gpu/spirv-tools .gpu/spirv-tools.tar.xz
mkdir -p .gpu/spirv-tools
for tool in spirv-opt spirv-val; do
    src=""
    for cand in .venv-build/lib/python3*/site-packages/cmeel.prefix/bin/$tool "$(command -v $tool || true)"; do
        [[ -n "$cand" && -x "$cand" ]] && { src=$cand; break; }
    done
    if [[ -z "$src" ]]; then
        log "WARNING: no $tool: the frozen step will be skipped"
        continue
    fi
    strip -o ".gpu/spirv-tools/$tool" "$src"
    bad=$(ldd ".gpu/spirv-tools/$tool" | grep -vE 'linux-vdso|ld-linux|lib(c|m|gcc_s|stdc\+\+|pthread|dl|rt)\.so' || true)
    [[ -z "$bad" ]] || die "$src needs shared libraries a GPU machine may lack: $bad"
done
tar -cJf .gpu/spirv-tools.tar.xz -C .gpu spirv-tools
rm -rf .gpu/spirv-tools

# --- 4. The fixture.
export LD_LIBRARY_PATH="$repo/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PSK_DEVICE=llvmpipe
cmp="python3 tools/compare_npy.py"
psk=.gpu/bin/psk
make_case() { # make_case KIND N SEED PSK_RUN_ARGS...
    local kind=$1 n=$2 seed=$3
    shift 3
    local dir=.gpu/fixture/$kind-n$n
    mkdir -p "$dir"
    if ((new_inputs)) || [[ ! -f $dir/q.npy || ! -f $dir/k.npy || ! -f $dir/v.npy ]]; then
        $cmp random "$dir/q.npy" --shape "1,1,$n,64" --dtype f16 --seed "$seed"
        $cmp random "$dir/k.npy" --shape "1,1,$n,64" --dtype f16 --seed "$((seed + 1))"
        $cmp random "$dir/v.npy" --shape "1,1,$n,64" --dtype f16 --seed "$((seed + 2))"
    fi
    # expected.npy: float32 storage on the same (float16-valued) inputs, generic kernels: the
    # function itself within ~1e-6, so a float16 run is held to the conformance tests' float16
    # tolerance (2e-3 against the float64 reference, tests/support/test_context.hpp).
    local t0=$SECONDS
    PSK_DISABLE_TEAM_KERNELS=1 "$psk" run --kind "$kind" --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" \
        --out "$dir/expected.npy" --dtype f32 "$@"
    log "$dir/expected.npy: generic kernels, float32 storage, on lavapipe in $((SECONDS - t0)) s"
    # Lavapipe's own errors against it (generic and lane-team kernels), the baseline for the GPU's.
    local variant dtype tol team
    for variant in generic:f16:2e-3 team:f16:2e-3 generic:f32:2e-4 team:f32:2e-4; do
        IFS=: read -r team dtype tol <<<"$variant"
        if [[ $team == generic ]]; then export PSK_DISABLE_TEAM_KERNELS=1; else unset PSK_DISABLE_TEAM_KERNELS; fi
        "$psk" run --kind "$kind" --q "$dir/q.npy" --k "$dir/k.npy" --v "$dir/v.npy" --out /tmp/gpu_prepare-check.npy \
            --dtype "$dtype" "$@" >/dev/null
        unset PSK_DISABLE_TEAM_KERNELS
        if ! $cmp compare /tmp/gpu_prepare-check.npy "$dir/expected.npy" --tol "$tol" \
            --label "$kind-n$n $dtype $team kernels (lavapipe)" | tee -a .gpu/fixture/README; then
            die "lavapipe's $dtype $team kernels miss the fixture's tolerance: not a fixture to pack"
        fi
    done
    rm -f /tmp/gpu_prepare-check.npy
    echo "$kind n=$n: psk run --kind $kind --dtype f32 $* (inputs: compare_npy.py random --seed $seed, $((seed + 1)), $((seed + 2)))" \
        >>.gpu/fixture/README
}
rm -f .gpu/fixture/README
mkdir -p .gpu/fixture
{
    echo "fixture made $(date -u +%FT%TZ) at $(git rev-parse --short HEAD)$([[ -n "$(git status --short -- lib shaders include)" ]] && echo ' + uncommitted changes to lib/shaders/include')"
    echo "expected = psk run on lavapipe, generic kernels (PSK_DISABLE_TEAM_KERNELS=1), float32 storage, on float16-valued inputs"
} >.gpu/fixture/README
make_case polysketch 16461 1 --sketch-size 32 --block-size 256 --local-exact --degree 4 --seed 0
make_case softmax 4093 11
# The comparison must fail on a perturbed copy (the harness' own test).
$cmp perturb .gpu/fixture/softmax-n4093/expected.npy /tmp/gpu_prepare-perturbed.npy --delta 0.01 >/dev/null
if $cmp compare /tmp/gpu_prepare-perturbed.npy .gpu/fixture/softmax-n4093/expected.npy --label "perturbed copy (must FAIL)"; then
    die "compare_npy.py accepted a perturbed copy"
fi
rm -f /tmp/gpu_prepare-perturbed.npy

# The binaries link the library's objects and its embedded SPIR-V each (~7 MiB apiece, ~135 MiB
# for psk, the library and the test binaries): one xz tarball at -9 (a 64 MiB window, which spans
# the repeats across files; the default's 8 MiB left 24 MiB of them) holds them in ~5 MiB and keeps
# what is copied to the GPU machine small now that the working tree holds the sample models.
# gpu_run.sh unpacks it with Python's tarfile (no xz binary needed on the GPU machine). About a
# minute of one core here.
t0=$SECONDS
tar -cf - -C .gpu bin lib tests | xz -9 -T1 >.gpu/binaries.tar.xz
rm -rf .gpu/bin .gpu/lib .gpu/tests
log "binaries packed: .gpu/binaries.tar.xz $(du -h .gpu/binaries.tar.xz | cut -f1) in $((SECONDS - t0)) s"

# --- 5. Manifest and size.
{
    echo "packed $(date -u +%FT%TZ) from $build_dir at $(git rev-parse HEAD)"
    echo "uncommitted changes (git status --short):"
    git status --short | sed 's/^/  /'
    echo "files:"
    (cd .gpu && find . -type f ! -name MANIFEST -printf '%s %p\n' | sort -k2 | while read -r size path; do
        printf '  %10s %s %s\n' "$size" "$(sha256sum "$path" | cut -c1-16)" "$path"
    done)
} >.gpu/MANIFEST

mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
tree_bytes=$(git ls-files -z -co --exclude-standard | xargs -0 -r stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
gl_bytes=$(du -sb .gl | cut -f1)
gpu_bytes=$(du -sb .gpu | cut -f1)
total=$((tree_bytes + gl_bytes + gpu_bytes))
log "for the GPU machine: working tree $(mib "$tree_bytes") + .gl $(mib "$gl_bytes") + .gpu $(mib "$gpu_bytes") = $(mib "$total")"
du -sh .gpu/* | sed 's/^/    /'
((total < 60 * 1048576)) || die "over 60 MiB: pack less (drop test binaries from the tests list, or fixture cases)"

cat <<EOF

On the GPU machine, in a copy of this working tree with .gl and .gpu (each command prints one line
per step and leaves gpu_run-PHASE.{summary,log,tar.gz} in --out, default \$OUT or /tmp/psk-gpu-results):
  bash tools/gpu_run.sh gpu      # everything in one command, inside 480 s (--deadline)
  (given more time: check, bisect, bench, peer; docs/GPU_RUN.md says what each does and how to read it)
EOF

if ((run_test)); then
    log "testing the harness on lavapipe (--quick)"
    rc=0
    for ph in gpu peer; do
        bash tools/gpu_run.sh "$ph" --lavapipe --quick --out "/tmp/psk-gpu-selftest/$ph" || rc=1
    done
    ((rc == 0)) && log "harness self-test passed" || die "harness self-test failed (/tmp/psk-gpu-selftest)"
fi
