#!/usr/bin/env bash
# The frozen specializations of tools/freeze_shaders.py run and pass on this device: a plan and a
# few conformance cases are run with PSK_SHADER_DUMP, every dumped specialization is frozen
# (constants made literals, loops unrolled, arrays split, by spirv-opt), then the same plan must
# name every kernel as replaced and the same cases must pass with PSK_SHADER_REPLACE.
#   frozen.sh PSK FREEZE_SHADERS_PY
set -euo pipefail
psk=$1
freeze=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/dump" "$work/frozen"
# Generic kernels in float32 (what a GPU without cooperative matrices runs), and the local-exact
# polysketch cases on the generic and the emulated cooperative paths.
plan=(info --plan --dtype f32 --causal --local-exact --head-dim 32)
cases=(conformance --quick --paths generic,emulated --filter polysketch_seed_p4_r8_b16_causal_localexact)
export PSK_DISABLE_TEAM_KERNELS=1 PSK_TUNING_TABLE=none
PSK_SHADER_DUMP="$work/dump" "$psk" "${plan[@]}" > /dev/null
PSK_SHADER_DUMP="$work/dump" "$psk" "${cases[@]}" > "$work/dumped.txt"
python3 "$freeze" "$work/dump" "$work/frozen"
PSK_SHADER_REPLACE="$work/frozen" "$psk" "${plan[@]}" > "$work/plan.txt"
kernels=$(grep -cE '^[a-z0-9_.]+ \(' "$work/plan.txt")
replaced=$(grep -c "^# stats: .* SPIR-V replaced by $work/frozen/" "$work/plan.txt" || true)
echo "plan: $kernels kernel lines, $replaced replaced"
if ((kernels == 0 || replaced != kernels)); then
    cat "$work/plan.txt"
    echo "FAIL: not every kernel of the plan ran its frozen module"
    exit 1
fi
PSK_SHADER_REPLACE="$work/frozen" "$psk" "${cases[@]}" | tee "$work/frozen.txt" | tail -4
ran=$(grep -cE ' PASS$| PASS ' "$work/frozen.txt" || true)
grep -q '^PASS: every case that ran is within its threshold' "$work/frozen.txt" || { echo "FAIL: a frozen case failed"; exit 1; }
((ran > 0)) || { echo "FAIL: no case ran"; exit 1; }
echo "frozen: $ran cases passed"
