#!/usr/bin/env bash
# psk compile (tools/psk/cmd_compile.cpp) end to end: plans made by `psk info --plan` on lavapipe and
# a GPU run's recorded plan, compiled kernel by kernel on lavapipe and, where Debian's Mesa has it,
# on RADV's null device (an AMD RDNA3 GPU's compiler, no GPU needed); and its refusals.
#
#   run_psk_compile.sh PSK SOURCE_DIR SCRATCH_DIR
#
# Exit 0 when every check holds, 1 with the failing check named.
set -uo pipefail

psk=$1 src=$2 scratch=$3
mkdir -p "$scratch"
plans=$scratch/plans.txt
: > "$plans"
fail() { echo "FAIL: $*"; exit 1; }

# 1. Plans on lavapipe: the generic kernels, the lane-team kernels, and the cooperative kernels as
#    the emulated backend runs them with the GPU's tilings (they compile natively on lavapipe).
for args in "--dtype f16 --local-exact" "--dtype f32 --full" "--dtype f16 --degree 8 --sketch-size 16" \
            "--kind softmax --dtype f16" "--dtype bf16 --local-exact --head-dim 128 --value-dim 128"; do
    for env in "PSK_DISABLE_TEAM_KERNELS=1" "PSK_COOPMAT_EMULATION=gpu-tiles" "PSK_NOTHING=0"; do
        env $env "$psk" info --plan --device llvmpipe $args >> "$plans" 2>&1 || fail "psk info --plan $args ($env)"
    done
done
out=$("$psk" compile "$plans" --device llvmpipe 2>&1); rc=$?
echo "$out" | tail -3
[ $rc -eq 0 ] || { echo "$out" | grep -v '^OK'; fail "lavapipe: exit status $rc"; }
echo "$out" | grep -q '^OK sketch_features_team\.' || fail "lavapipe: no lane-team kernel compiled"
echo "$out" | grep -q '^OK block_states_coopmat\.emu_f16\.f16 ' || fail "lavapipe: no emulated cooperative kernel compiled"
echo "$out" | grep -q '^OK polysketch_output_rows\.f32 ' || fail "lavapipe: the generic row output not compiled"
echo "$out" | grep -Eq '^[0-9]+ kernel\(s\), 0 failed' || fail "lavapipe: summary"

# 2. A GPU run's plan (NVIDIA H200, recorded in docs/runs/): its KHR cooperative kernels are
#    skipped on lavapipe (no VK_KHR_cooperative_matrix), every generic kernel compiles.
run=$src/docs/runs/2026-11-27-h200-3728c9d/gpu_run-gpu.tar.gz
tar -xzf "$run" -C "$scratch" ./plan.txt || fail "cannot read plan.txt from $run"
out=$("$psk" compile "$scratch/plan.txt" --device llvmpipe 2>&1); rc=$?
[ $rc -eq 0 ] || { echo "$out"; fail "H200 plan on lavapipe: exit status $rc"; }
echo "$out" | grep -q '^SKIPPED sketch_features_coopmat\.khr_f16_random\.f16 .*\[self-test line [0-9]*\]: no VK_KHR_cooperative_matrix' \
    || fail "H200 plan: the self-test's cooperative feature map not skipped with its reason"
echo "$out" | grep -q '^OK polysketch_output_rows\.f32 ROWS=64 ' || fail "H200 plan: the row output not compiled"
# ... and as the emulated backend's variants: the same tiles, compiled natively here.
"$psk" compile "$scratch/plan.txt" --device llvmpipe --backend nv > /dev/null 2>&1; [ $? -eq 0 ] || fail "--backend nv on lavapipe"

# 3. Refusals: no such file (2), a line that is not NAME=VALUE (2), a constant the kernel does not
#    have (1, the kernel named), an unknown option (2).
"$psk" compile "$scratch/no-such-plan.txt" > "$scratch/err.txt" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "cannot read" "$scratch/err.txt" || fail "a missing plan: status $rc, $(cat "$scratch/err.txt")"
echo "block_scan.f32 (generic) WORKGROUP=128 LANES: x" > "$scratch/bad.txt"
"$psk" compile "$scratch/bad.txt" --device llvmpipe > "$scratch/err.txt" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q 'line 1: "LANES" is not NAME=VALUE' "$scratch/err.txt" || fail "a malformed line: status $rc, $(cat "$scratch/err.txt")"
echo "block_scan.f32 (generic) WORKGROUP=128 LANES=2 TILE=7: x" > "$scratch/bad.txt"
"$psk" compile "$scratch/bad.txt" --device llvmpipe > "$scratch/err.txt" 2>&1; rc=$?
[ $rc -eq 1 ] && grep -q 'FAILED block_scan.f32 .*constants not in its interface: TILE' "$scratch/err.txt" \
    || fail "an unknown constant: status $rc, $(cat "$scratch/err.txt")"
echo "the plan names nothing" > "$scratch/bad.txt"
"$psk" compile "$scratch/bad.txt" --device llvmpipe > "$scratch/err.txt" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q "names no kernel" "$scratch/err.txt" || fail "an empty plan: status $rc"
"$psk" compile --frobnicate > "$scratch/err.txt" 2>&1; [ $? -eq 2 ] || fail "an unknown option"

# 4. AMD's compiler, where Debian's Mesa RADV is installed: its null device (RADV_FORCE_FAMILY) has
#    no memory and runs nothing, but compiles. Mesa 22.3's has no cooperative matrices (skipped);
#    every other kernel of the plans compiles, with the driver's statistics.
icd=""
for f in /usr/share/vulkan/icd.d/radeon_icd.x86_64.json /usr/share/vulkan/icd.d/radeon_icd.json; do [ -f "$f" ] && icd=$f && break; done
if [ -z "$icd" ]; then
    echo "RADV not installed: the null-device check skipped"
else
    out=$(VK_ICD_FILENAMES=$icd RADV_FORCE_FAMILY=gfx1100 "$psk" compile "$plans" 2>&1); rc=$?
    echo "$out" | grep -E '^device:|kernel\(s\)'
    [ $rc -eq 0 ] || { echo "$out" | grep -v '^OK'; fail "RADV null device: exit status $rc"; }
    echo "$out" | grep -q '^device: .*RADV' || fail "RADV null device not used"
    echo "$out" | grep -q '^OK sketch_features\.random\.f16 .*VGPRs = [0-9]' || fail "RADV: no register count reported"

    # 5. The generic kernels' staging as AMD's compiler schedules it: most global loads issued in
    #    batches of 8 before a wait for all of them (shaders/staging.glsl; a store under a guard
    #    lets the compiler sink each load to its store, one in flight: 0-47% of the loads batched
    #    before the stores lost their guard, 75-94% since; tools/aco_loops.py --in-flight).
    if command -v python3 > /dev/null; then
        staged=$scratch/staged.txt
        : > "$staged"
        for args in "--dtype f16 --local-exact" "--dtype f32 --local-exact" "--dtype f32 --local-exact --head-dim 128 --value-dim 128"; do
            PSK_DISABLE_TEAM_KERNELS=1 "$psk" info --plan --device llvmpipe $args 2>&1 \
                | grep -E '^(sketch_features|block_states|polysketch_output)[._]' >> "$staged" || fail "psk info --plan $args (staging)"
        done
        grep -q '^polysketch_output\.f32 ' "$staged" || fail "staging: the plans have no register-tiled output"
        VK_ICD_FILENAMES=$icd RADV_FORCE_FAMILY=gfx1100 RADV_DEBUG=shaders,nocache "$psk" compile "$staged" > "$scratch/staged-dump.txt" 2>&1 \
            || fail "RADV: the generic kernels did not compile"
        out=$(python3 "$src/tools/aco_loops.py" --in-flight 0.7 "$scratch/staged-dump.txt"); rc=$?
        echo "$out"
        [ $rc -eq 0 ] || fail "RADV: a generic kernel's staging loads are not in flight together"
        [ "$(echo "$out" | grep -c '^OK ')" -ge 4 ] || fail "RADV: fewer than 4 generic kernels checked for loads in flight"
    else
        echo "python3 not found: the loads-in-flight check skipped"
    fi
fi
echo "psk compile: every check passed"
