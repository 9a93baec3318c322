# Sourced by tools/gpu_run.sh: the bisect matrix (docs/GPU_RUN.md, "Bisect: the cooperative-matrix
# switches").
#
# One row per setting of the library's cooperative-matrix switches, read from the environment:
#   PSK_COOPMAT_BACKEND        auto | khr | nv | emulated | off   which backend the kernels use
#   PSK_COOPMAT_STAGES         all | none | features,states,output,baselines   which stages may
#   PSK_COOPMAT_SELFTEST       1 | 0   the start-up known-answer self-test of each cooperative kernel
#   PSK_COOPMAT_FEATURE_TERMS  3 | 1   the cooperative feature map's hi/lo products per step
# Each row runs, under its setting: psk info --plan (polysketch f16 p=4 r=32 b=256 local exact
# h=64, and softmax f16: which kernels the setting actually plans; the defaults row also psk info,
# which reports the self-test), psk conformance --quick on the
# path of its backend (khr / nv / auto: cooperative, emulated: emulated, off: generic; --quick
# adds --filter polysketch) with JSON, and the fixture at 1 head in f16 (psk run + compare_npy.py;
# with --quick only in the first row of each backend). Every row but the last runs with
# PSK_COOPMAT_SELFTEST=0 (the raw kernels); the last row leaves all four at the library's
# defaults (what a user gets). Rows of a backend the device lacks say so and cost nothing. Each
# row also sets the variables psk conformance sets for its path (PSK_DISABLE_COOPMAT,
# PSK_COOPMAT_EMULATION, PSK_DISABLE_TEAM_KERNELS), so that the plan, the conformance cases and
# the fixture run the same kernels, also with a library that does not read the new switches yet:
# the "switches" column then says which were ignored.

# NAME BACKEND STAGES FEATURE_TERMS SELFTEST, in order of value (a cut keeps the first rows).
# "default" unsets the four switches. The pruned rows: off ignores the stages (one row), stages =
# none is the generic kernels on every backend (one row, khr), emulated keeps FEATURE_TERMS = 3.
bisect_matrix() {
    cat <<'ROWS'
off                off       all       3 0
khr/all            khr       all       3 0
nv/all             nv        all       3 0
khr/features       khr       features  3 0
khr/features/t1    khr       features  1 0
nv/features        nv        features  3 0
nv/features/t1     nv        features  1 0
khr/states         khr       states    3 0
khr/output         khr       output    3 0
nv/states          nv        states    3 0
nv/output          nv        output    3 0
emulated/all       emulated  all       3 0
emulated/features  emulated  features  3 0
emulated/states    emulated  states    3 0
emulated/output    emulated  output    3 0
khr/none           khr       none      3 0
default            auto      all       3 1
ROWS
}

# The python that turns one row's files into a JSON line, and all rows into the table.
write_bisect_py() {
    cat >"$work/bisect.py" <<'PY'
import json, os, re, sys

STAGE_OF = {"sketch_features": "features", "block_states": "states", "block_scan": "prefix",
            "polysketch_output": "output", "attention_tiled": "baselines",
            "attention_flash": "baselines"}
SHORT = {"features": "F", "states": "S", "prefix": "P", "output": "O", "baselines": "B"}


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def plan_stages(text):
    """{stage: [implementation labels]} from psk info --plan lines "<variant> (<impl>) ...: why"."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\S+) \((generic|team|cooperative)\)(.*)$", line)
        if not m:
            continue
        variant, impl, rest = m.groups()
        stage = next((s for p, s in STAGE_OF.items() if variant.startswith(p)), "other")
        if impl == "cooperative":
            impl = "emu" if ".emu_" in variant else "khr" if ".khr_" in variant else "nv" if ".nv_" in variant else "coop"
            t = re.search(r"\bPRODUCT_TERMS=(\d+)", rest)
            if t and stage == "features":
                impl += ":t" + t.group(1)
        elif impl == "generic":
            impl = "gen"
        labels = out.setdefault(stage, [])
        if impl not in labels:
            labels.append(impl)
    return out


def row(args):
    d, name, backend, stages, terms, selftest, path = args
    r = {"row": name, "backend": backend, "stages": stages, "feature_terms": terms, "selftest": selftest, "path": path}
    status = read(os.path.join(d, "status")).strip()
    r["status"] = status or "ran"
    if status.startswith("not available") or status.startswith("not run"):
        return r
    # The plan.
    plan = plan_stages(read(os.path.join(d, "plan-polysketch-f16.txt")))
    for s, labels in plan_stages(read(os.path.join(d, "plan-softmax-f16.txt"))).items():
        plan.setdefault(s, labels)
    r["plan"] = " ".join(f"{SHORT.get(s, s)}={'/'.join(v)}" for s, v in plan.items()) or "?"
    # Did the library honor the switches? A cooperative kernel where the setting forbids one, of
    # another backend, or with the other number of feature terms.
    ignored = []
    allowed = set(("features", "states", "output", "baselines") if stages == "all" else () if stages == "none"
                  else stages.split(","))
    coop = {s: [l for l in v if l.split(":")[0] in ("khr", "nv", "emu", "coop")] for s, v in plan.items()}
    want = {"khr": "khr", "nv": "nv", "emulated": "emu"}.get(backend)
    if selftest == "default":
        pass
    elif backend == "off":
        bad = [s for s, v in coop.items() if v]
        if bad:
            ignored.append("BACKEND=off (" + ",".join(SHORT.get(s, s) for s in bad) + " cooperative)")
    else:
        bad = [s for s, v in coop.items() if v and s not in allowed]
        if bad:
            ignored.append("STAGES (" + ",".join(SHORT.get(s, s) for s in bad) + " cooperative)")
        other = sorted({l.split(":")[0] for v in coop.values() for l in v} - {want})
        if other:
            ignored.append("BACKEND (" + "/".join(other) + ")")
        if allowed and not any(coop.get(s) for s in allowed):
            ignored.append("no cooperative kernel planned")
        ft = [l for l in coop.get("features", []) if ":t" in l]
        if ft and all(not l.endswith(":t" + terms) for l in ft):
            ignored.append("FEATURE_TERMS (" + ft[0].split(":")[1] + ")")
    r["switches"] = "(library defaults)" if selftest == "default" else "ok" if not ignored else "; ".join(ignored)
    # How the library read the switches (the plan's "# cooperative switches: ..." line), and what
    # it said about its self-test (psk info, the plans, conformance).
    m = re.search(r"^# cooperative switches: *(.*)$", read(os.path.join(d, "plan-polysketch-f16.txt")), re.M)
    r["library_switches"] = m.group(1).strip() if m else None
    notes = []
    for f in ("info.txt", "plan-polysketch-f16.txt", "plan-softmax-f16.txt", "conformance.txt"):
        for line in read(os.path.join(d, f)).splitlines():
            if line.startswith("# cooperative switches"):
                continue
            if re.search(r"self.?test", line, re.I) and line.strip() not in notes:
                notes.append(line.strip())
    r["selftest_notes"] = notes[:6]
    # psk conformance.
    try:
        c = json.load(open(os.path.join(d, "conformance.json")))
        s = c["summary"]
        cases = [x for x in c["cases"] if x["status"] != "skip"]
        sixteen = [x for x in cases if x["storage"] in ("f16", "bf16")]
        worst = {}
        for x in sixteen:
            e = float("inf") if x["error"] is None else x["error"]
            worst[x["storage"]] = max(worst.get(x["storage"], 0.0), e)
        r.update(cases=s["cases"], passed=s["passed"], failed=s["failed"], skipped=s["skipped"],
                 nonfinite=sum(1 for x in cases if x["status"] == "fail" and x["error"] is None),
                 worst_f16=worst.get("f16"), worst_bf16=worst.get("bf16"),
                 paths_skipped=[p["name"] + ": " + p["reason"] for p in c["paths"] if p["status"] != "ran"],
                 failures=[x["name"] for x in cases if x["status"] == "fail"][:8])
    except (OSError, ValueError, KeyError) as e:
        r["conformance_error"] = (read(os.path.join(d, "conformance.rc")).strip() + " " + str(e)).strip()
    r["conformance_rc"] = read(os.path.join(d, "conformance.rc")).strip()
    # The fixture.
    fx = read(os.path.join(d, "fixture.jsonl")).strip().splitlines()
    if fx:
        try:
            f = json.loads(fx[-1])
            r["fixture"] = {"status": f["status"], "max_rel_error": f["max_rel_error"], "nonfinite": f["nonfinite"]}
        except (ValueError, KeyError):
            pass
    elif os.path.exists(os.path.join(d, "fixture.txt")):
        last = (read(os.path.join(d, "fixture.txt")).strip().splitlines() or ["psk run failed"])[-1]
        r["fixture"] = {"status": "cut" if last.startswith("cut") else "error", "note": last}
    return r


def sci(v):
    if v is None:
        return "-"
    return "inf" if v == float("inf") else f"{v:.2e}"


def table(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    print("bisect matrix: psk conformance --quick (cases / failed / worst 16-bit error / non-finite) and the fixture")
    print("(polysketch n=16461 H=1 f16, max rel. error, tol 2e-3) per setting; PSK_COOPMAT_SELFTEST=0 but in the")
    print("'default' row; plan: F features, S states, P prefix, O output, B softmax/poly (gen generic, khr / nv /")
    print("emu cooperative, :tN feature terms); switches: which settings the library ignored")
    print("%-18s %-12s %5s %4s %4s %9s %9s %4s  %-18s %-34s %s" % ("row", "path", "cases", "fail", "skip", "worst f16", "worst bf16",
                                                                 "nonf", "fixture f16", "plan", "switches"))
    for r in rows:
        if r["status"] != "ran":
            print("%-18s %-12s %s" % (r["row"], r["path"], r["status"]))
            continue
        if "cases" in r:
            conf = "%5d %4d %4d %9s %9s %4d" % (r["cases"], r["failed"], r["skipped"], sci(r.get("worst_f16")),
                                               sci(r.get("worst_bf16")), r["nonfinite"])
        else:
            conf = "%-41s" % ("conformance: " + r.get("conformance_error", "?"))[:41]
        f = r.get("fixture")
        if not f:
            fix = "-"
        elif f["status"] in ("error", "cut"):
            fix = f["status"]
        else:
            fix = ("FAIL %d nonf" % f["nonfinite"]) if f.get("nonfinite") else (
                ("PASS " if f["status"] == "pass" else "FAIL ") + sci(f["max_rel_error"]))
        print("%-18s %-12s %s  %-18s %-34s %s" % (r["row"], r["path"], conf, fix, r.get("plan", "?"), r.get("switches", "")))
        if r["selftest"] == "default" and r.get("library_switches"):
            print("%-18s   the library's reading: %s" % ("", r["library_switches"][:150]))
        for n in r.get("selftest_notes", []):
            print("%-18s   self-test: %s" % ("", n[:150]))
        for p in r.get("paths_skipped", []):
            print("%-18s   path %s" % ("", p[:150]))


if sys.argv[1] == "row":
    print(json.dumps(row(sys.argv[2:9])))
else:
    table(sys.argv[2])
PY
}

# bisect_row NAME BACKEND STAGES TERMS SELFTEST: one row; appends its JSON line to bisect.jsonl.
bisect_row() {
    local name=$1 backend=$2 stages=$3 terms=$4 selftest=$5
    local d="$work/bisect/${name//\//_}" path rc=0
    mkdir -p "$d"
    case "$backend" in off) path=generic ;; emulated) path=emulated ;; *) path=cooperative ;; esac
    if [[ $name == default ]]; then
        selftest=default
        path=all
    fi
    local emit=(python3 "$work/bisect.py" row "$d" "$name" "$backend" "$stages" "$terms" "$selftest" "$path")
    # A backend the device lacks: said, not run.
    local has=""
    case "$backend" in khr) has=$bisect_khr ;; nv) has=$bisect_nv ;; esac
    if [[ -n "$has" && "$has" != yes ]]; then
        echo "not available on this device (psk info: cooperative matrix: $bisect_coop)" >"$d/status"
        "${emit[@]}" >>"$work/bisect.jsonl"
        echo "row $name: not available on this device"
        return 0
    fi
    local left=$((step_end - SECONDS))
    if ((left < 8)); then
        echo "not run (the step's time limit)" >"$d/status"
        "${emit[@]}" >>"$work/bisect.jsonl"
        return 1
    fi
    # The row's environment (env's arguments: the unset ones first): the four switches (the
    # defaults row unsets them) and the variables of the conformance path.
    local unsets=(-u PSK_COOPMAT_BACKEND -u PSK_COOPMAT_STAGES -u PSK_COOPMAT_SELFTEST -u PSK_COOPMAT_FEATURE_TERMS -u PSK_VALIDATION
        -u PSK_TUNING_TABLE)
    local sets=()
    # The switched rows test kernels, not a device's tuning table (which may route a stage to the
    # generic kernel): no table there; the defaults row keeps the library's choice, table included.
    [[ $selftest == default ]] || sets+=(PSK_COOPMAT_BACKEND="$backend" PSK_COOPMAT_STAGES="$stages"
        PSK_COOPMAT_FEATURE_TERMS="$terms" PSK_COOPMAT_SELFTEST="$selftest" PSK_TUNING_TABLE=none)
    case "$path" in
        generic) sets+=(PSK_DISABLE_TEAM_KERNELS=1 PSK_DISABLE_COOPMAT=1 PSK_COOPMAT_EMULATION=0) ;;
        emulated) sets+=(PSK_DISABLE_TEAM_KERNELS=0 PSK_DISABLE_COOPMAT=0 PSK_COOPMAT_EMULATION=1) ;;
        *) unsets+=(-u PSK_DISABLE_TEAM_KERNELS -u PSK_DISABLE_COOPMAT -u PSK_COOPMAT_EMULATION) ;;
    esac
    local envs=("${unsets[@]}" "${sets[@]}")
    printf '%s\n' "${envs[@]}" >"$d/env.txt"
    local row_end=$((SECONDS + bisect_row_limit))
    ((row_end > step_end)) && row_end=$step_end
    rowtmo() { # rowtmo LIMIT CMD...: tmo, also cut to the row's end
        local limit=$1
        shift
        ((limit > row_end - SECONDS)) && limit=$((row_end - SECONDS))
        tmo "$limit" "$@"
    }
    # 1. What the setting plans (and, in the defaults row, what psk info says about the self-test).
    [[ $selftest == default ]] && rowtmo 15 env "${envs[@]}" "$PSK" info >"$d/info.txt" 2>&1
    rowtmo 15 env "${envs[@]}" "$PSK" info --plan --kind polysketch --dtype f16 --causal --local-exact --degree 4 \
        --sketch-size 32 --block-size 256 --head-dim 64 >"$d/plan-polysketch-f16.txt" 2>&1
    rowtmo 15 env "${envs[@]}" "$PSK" info --plan --kind softmax --dtype f16 --causal --head-dim 64 >"$d/plan-softmax-f16.txt" 2>&1
    # 2. psk conformance --quick on the backend's path (the defaults row: every path).
    local conf=(--quick --json "$d/conformance.json")
    [[ $path == all ]] || conf+=(--paths "$path")
    ((quick)) && conf+=(--filter polysketch)
    rowtmo "$bisect_row_limit" env "${envs[@]}" "$PSK" conformance "${conf[@]}" >"$d/conformance.txt" 2>&1 || rc=$?
    echo "$rc" >"$d/conformance.rc"
    ((rc == 124)) && echo "conformance cut: the row's time ran out (PSK_GPU_BISECT_ROW_LIMIT ${bisect_row_limit}s)" >>"$d/conformance.txt"
    # 3. The fixture at 1 head, f16 (with --quick only in the first row of each backend).
    if ((!quick)) || [[ " $bisect_fixture_done " != *" $backend "* ]]; then
        bisect_fixture_done+=" $backend"
        local fx="$FIXTURE/polysketch-n16461" out="$scratch/bisect-out.npy"
        if [[ -f "$fx/expected.npy" ]]; then
            rm -f "$out"
            local frc=0
            rowtmo "$bisect_row_limit" env "${envs[@]}" "$PSK" run --kind polysketch --q "$fx/q.npy" --k "$fx/k.npy" --v "$fx/v.npy" --out "$out" \
                --dtype f16 --sketch-size 32 --block-size 256 --local-exact --degree 4 --seed 0 >"$d/fixture.txt" 2>&1 || frc=$?
            if ((frc == 0)); then
                rowtmo 30 python3 "$compare" compare "$out" "$fx/expected.npy" --tol "$fixture_tol" \
                    --label "bisect $name polysketch-n16461-H1-f16" --json "$d/fixture.jsonl" >>"$d/fixture.txt" 2>&1 || frc=$?
            fi
            ((frc == 124)) && echo "cut: the row's time ran out (PSK_GPU_BISECT_ROW_LIMIT ${bisect_row_limit}s)" >>"$d/fixture.txt"
            ((frc != 0 && frc != 124 && frc != 1)) && echo "exit $frc" >>"$d/fixture.txt"
            rm -f "$out"
        fi
    fi
    "${emit[@]}" >>"$work/bisect.jsonl"
    tail -3 "$d/conformance.txt"
    cat "$d/fixture.txt" 2>/dev/null | tail -1
    return 0
}

bisect_khr="" bisect_nv="" bisect_coop="" bisect_fixture_done=""
do_bisect() {
    write_bisect_py
    mkdir -p "$work/bisect"
    : >"$work/bisect.jsonl"
    # Which cooperative-matrix extensions the device has (psk info of setup).
    local dev
    dev=$(awk -v want="$device_line" '$0 == want {on = 1; next} /^\[[0-9]+\] / {on = 0} on' "$work/psk-info.txt")
    bisect_coop=$(sed -n 's/^ *cooperative matrix: *//p' <<<"$dev" | head -1)
    bisect_nv=$(grep -oE 'NV (yes|no)' <<<"$bisect_coop" | awk '{print $2}')
    bisect_khr=$(grep -oE 'KHR (yes|no)' <<<"$bisect_coop" | awk '{print $2}')
    : "${bisect_nv:=no}" "${bisect_khr:=no}"
    local t0=$SECONDS n=0 name backend stages terms selftest
    say "bisect: cooperative matrix: ${bisect_coop:-?}; rows: $(bisect_matrix | awk -v pick=",${bisect_rows}," 'pick == ",," || index(pick, "," $1 ",") {printf "%s%s", sep, $1; sep = " "}')"
    while read -r name backend stages terms selftest; do
        [[ -z "$bisect_rows" || ",$bisect_rows," == *",$name,"* ]] || continue
        echo "=== bisect row $name: PSK_COOPMAT_BACKEND=$backend PSK_COOPMAT_STAGES=$stages PSK_COOPMAT_FEATURE_TERMS=$terms PSK_COOPMAT_SELFTEST=$selftest"
        bisect_row "$name" "$backend" "$stages" "$terms" "$selftest" </dev/null
        n=$((n + 1))
    done < <(bisect_matrix)
    python3 "$work/bisect.py" table "$work/bisect.jsonl" | tee "$work/bisect/table.txt" | show
    # The step fails when a row ran out of time; the rows' own failures are findings, not harness
    # failures (conformance and fixture report those).
    local cut
    cut=$(grep -c '"status": "not run' "$work/bisect.jsonl")
    say "$( ((cut == 0)) && echo OK || echo FAIL) bisect: $n rows in $((SECONDS - t0))s$( ((cut)) && echo ", $cut not run (time limit)") (bisect/table.txt, bisect.jsonl, bisect/ROW/)"
    ((cut == 0))
}
