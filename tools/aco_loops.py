#!/usr/bin/env python3
"""Instruction counts per loop of the kernels Mesa's RADV compiled (its ACO compiler's dump), for
the performance model's issue term (docs/MODEL.md, "An issue floor from a compiler's instruction
counts").

    source .radv/env   # tools/install_radv_null.sh
    RADV_DEBUG=shaders,nocache RADV_FORCE_FAMILY=navi31 build/tools/psk compile PLAN > dump.txt 2>&1
    python3 tools/aco_loops.py dump.txt

For each compiled kernel (in the order psk compile printed them): its instructions by kind, then
every loop with its basic blocks, nesting, and its instructions per iteration, inclusive of the
loops inside it and of its own (wmma: matrix products; lds: shared memory; vmem: buffer loads and
stores; smem: scalar loads; valu / salu: vector / scalar ALU, branches and waits). A loop whose trip
count the kernel fixes by specialization constants is usually unrolled by the compiler, so the
loops left are the kernels' run-time loops: key tiles, feature chunks, blocks. Standard library only.

    python3 tools/aco_loops.py --in-flight MIN_SHARE dump.txt

reports, per kernel, how many of its global loads are issued in batches of at least 8 before a
wait for all of them (`s_waitcnt vmcnt(0)`): the loads in flight together that shaders/staging.glsl
writes for, as the compiler scheduled them (docs/MODEL.md, "Stores without a guard"). Exit status 1
when a kernel with 8 loads or more has a smaller share than MIN_SHARE (0 to 1).

    python3 tools/aco_loops.py --waits dump.txt

lists, per kernel, the groups of fewer than 8 loads and the basic block each starts in (the
disassembly's BBn: labels), which is where a load waited for alone sits.
"""
import collections
import re
import sys


def kind(op):
    if op.startswith("v_wmma"):
        return "wmma"
    if op.startswith("ds_"):
        return "lds"
    if op.startswith(("buffer_", "global_", "scratch_")):
        return "vmem"
    if op.startswith(("s_load", "s_buffer_load")):
        return "smem"
    if op.startswith("v_"):
        return "valu"
    return "salu"


def shaders(text):
    """(name, IR, disassembly) per compiled shader: each dump holds its IR, then "disasm:" and the
    code; psk compile prints the kernel's "OK <variant> ..." line after the driver compiled it (a
    kernel that repeats an earlier line's pipeline is not compiled again, so has no dump)."""
    starts = [m.start() for m in re.finditer("ACO shader stage:", text)] + [len(text)]
    for begin, end in zip(starts, starts[1:]):
        part = text[begin:end]
        if "\ndisasm:\n" not in part:
            continue
        ir, dis = part.split("\ndisasm:\n", 1)
        named = re.search(r"^(?:OK|FAILED) (\S+)", text[begin:], re.M)
        yield (named.group(1) if named else "?"), ir, dis


def analyse(ir, dis):
    # Loop headers (the IR marks them) and their back edge: the latest of their linear predecessors.
    loops = []
    for m in re.finditer(r"\nBB(\d+)\n/\* logical preds: [^/]*/ linear preds: ([^/]*)/ kind: ([^*]*)\*/", ir):
        if "loop-header" in m.group(3):
            preds = [int(x) for x in re.findall(r"BB(\d+)", m.group(2))]
            loops.append((int(m.group(1)), max(preds)))
    blocks = collections.OrderedDict()
    cur = None
    for line in dis.splitlines():
        m = re.match(r"BB(\d+):", line)
        if m:
            cur = int(m.group(1))
            blocks[cur] = collections.Counter()
            continue
        if cur is None or not line.startswith("\t"):
            continue
        fields = line.strip().split()
        if not fields:
            continue
        blocks[cur]["all"] += 1
        blocks[cur][kind(fields[0])] += 1
    return loops, blocks


BATCH = 8


def load_groups(dis):
    """Global loads issued between consecutive waits for every outstanding one (vmcnt(0)), in
    program order: (count, the basic block of the group's first load) per group (a wait with none
    issued since the last adds nothing)."""
    groups, current, first, block = [], 0, None, None
    for line in dis.splitlines():
        fields = line.strip().split()
        if not fields:
            continue
        if fields[0].startswith("BB") and fields[0].endswith(":"):
            block = fields[0][:-1]
        elif fields[0].startswith(("buffer_load", "global_load")):
            if not current:
                first = block
            current += 1
        elif fields[0] == "s_waitcnt" and "vmcnt(0)" in line:
            if current:
                groups.append((current, first))
            current = 0
    if current:
        groups.append((current, first))
    return groups


def loads_between_waits(dis):
    """The counts of load_groups."""
    return [count for count, _ in load_groups(dis)]


def batched_share(counts):
    total = sum(counts)
    return (sum(c for c in counts if c >= BATCH) / total) if total else 1.0


def span(blocks, first, last):
    total = collections.Counter()
    for bb, c in blocks.items():
        if first <= bb <= last:
            total.update(c)
    return total


def describe(c):
    return f"{c['all']} (" + ", ".join(f"{k} {c[k]}" for k in ("wmma", "lds", "vmem", "smem", "valu", "salu")) + ")"


# A made-up dump: one kernel, a loop BB1-BB3 (a back edge from BB3) holding a loop BB2-BB2, and the
# instructions after it; psk compile's line after the dump names it.
SELF_TEST_DUMP = """ACO shader stage: SW (CS), HW (COMPUTE_SHADER)
BB0
/* logical preds: / linear preds: / kind: top-level, */
BB1
/* logical preds: BB0, BB3, / linear preds: BB0, BB3, / kind: loop-header, */
BB2
/* logical preds: BB1, BB2, / linear preds: BB1, BB2, / kind: loop-header, */
BB3
/* logical preds: BB2, / linear preds: BB2, / kind: loop-exit, */
BB4
/* logical preds: BB3, / linear preds: BB3, / kind: uniform, top-level, */
disasm:
BB0:
\ts_mov_b32 s0, 0 ; 0
BB1:
\tbuffer_load_b32 v1, v0, s[0:3], 0 offen ; 0
\tds_store_b32 v0, v1 ; 0
BB2:
\tv_wmma_f32_16x16x16_f16 v[0:7], v[8:11], v[12:15], v[0:7] ; 0
\tv_add_f32_e32 v1, v1, v2 ; 0
\ts_cbranch_scc1 BB2 ; 0
BB3:
\ts_cbranch_scc1 BB1 ; 0
BB4:
\ts_endpgm ; 0
OK micro_coopmat.khr_f16.f16 WN=4: VGPRs = 8
"""

# A made-up disassembly: 8 loads before one wait for all, then two loads each waited for alone,
# the stores and partial waits in between not ending a batch.
SELF_TEST_LOADS = """\tbuffer_load_b32 v1, v0, s[0:3], 0 offen
\tglobal_load_b32 v2, v[0:1], off
\tbuffer_load_u16 v3, v0, s[0:3], 0 offen
\ts_waitcnt vmcnt(2)
\tds_store_b32 v0, v1
\tbuffer_load_b32 v4, v0, s[0:3], 0 offen
\tbuffer_load_b32 v5, v0, s[0:3], 0 offen
\tbuffer_load_b32 v6, v0, s[0:3], 0 offen
\tbuffer_load_b32 v7, v0, s[0:3], 0 offen
\tbuffer_load_b32 v8, v0, s[0:3], 0 offen
\ts_waitcnt vmcnt(0) lgkmcnt(0)
\tbuffer_store_b32 v1, v0, s[0:3], 0 offen
\ts_buffer_load_b32 s4, s[0:3], 0x0
\tbuffer_load_b32 v9, v0, s[0:3], 0 offen
\ts_waitcnt vmcnt(0)
\tbuffer_load_b32 v10, v0, s[0:3], 0 offen
\ts_waitcnt vmcnt(0)
"""


def self_test():
    text = SELF_TEST_DUMP
    found = list(shaders(text))
    assert [name for name, _, _ in found] == ["micro_coopmat.khr_f16.f16"], found
    loops, blocks = analyse(found[0][1], found[0][2])
    assert sorted(loops) == [(1, 3), (2, 2)], loops
    outer = span(blocks, 1, 3)
    assert (outer["all"], outer["vmem"], outer["lds"], outer["wmma"], outer["valu"], outer["salu"]) == (6, 1, 1, 1, 1, 2), outer
    assert span(blocks, 0, 1 << 30)["all"] == 8
    counts = loads_between_waits(SELF_TEST_LOADS)
    assert counts == [8, 1, 1], counts
    groups = load_groups("BB7:\n" + SELF_TEST_LOADS.replace("\tbuffer_load_b32 v10", "BB9:\n\tbuffer_load_b32 v10"))
    assert groups == [(8, "BB7"), (1, "BB7"), (1, "BB9")], groups
    assert abs(batched_share(counts) - 0.8) < 1e-9, batched_share(counts)
    assert batched_share([]) == 1.0 and batched_share([7, 7]) == 0.0
    print("OK aco_loops self-test")
    return 0


def in_flight(text, min_share):
    status, count = 0, 0
    for name, _, dis in shaders(text):
        count += 1
        counts = loads_between_waits(dis)
        share = batched_share(counts)
        histogram = ", ".join(f"{n} x {c}" for c, n in sorted(collections.Counter(counts).items()))
        low = sum(counts) >= BATCH and share < min_share
        status |= low
        print(f"{'LOW' if low else 'OK'} {name}: {sum(counts)} loads, {100 * share:.0f}% in batches of {BATCH} or more "
              f"before a wait for all (loads between waits: {histogram or 'none'})")
    if not count:
        print("aco_loops.py: no ACO dump found (RADV_DEBUG=shaders on a RADV device)", file=sys.stderr)
        return 1
    return 1 if status else 0


def waits(text):
    """Per kernel, the groups of fewer than BATCH loads and where each starts: where to look."""
    count = 0
    for name, _, dis in shaders(text):
        count += 1
        small = [f"{n} at {block}" for n, block in load_groups(dis) if n < BATCH]
        print(f"{name}: {len(small)} group(s) of fewer than {BATCH} loads" + (": " + ", ".join(small) if small else ""))
    if not count:
        print("aco_loops.py: no ACO dump found (RADV_DEBUG=shaders on a RADV device)", file=sys.stderr)
        return 1
    return 0


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    if len(sys.argv) == 3 and sys.argv[1] == "--waits":
        with open(sys.argv[2], errors="replace") as f:
            return waits(f.read())
    if len(sys.argv) == 4 and sys.argv[1] == "--in-flight":
        with open(sys.argv[3], errors="replace") as f:
            return in_flight(f.read(), float(sys.argv[2]))
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(sys.argv) == 2 else 2
    with open(sys.argv[1], errors="replace") as f:
        text = f.read()
    count = 0
    for i, (name, ir, dis) in enumerate(shaders(text)):
        count += 1
        loops, blocks = analyse(ir, dis)
        print(f"kernel {i + 1}: {name}")
        print(f"  program: {describe(span(blocks, 0, 1 << 30))}")
        for head, back in sorted(loops):
            inner = [(a, b) for a, b in loops if head < a and b <= back]
            own = span(blocks, head, back)
            for a, b in inner:
                if not any(a2 < a and b <= b2 for a2, b2 in inner):
                    own.subtract(span(blocks, a, b))
            depth = sum(1 for a, b in loops if a < head and back <= b)
            print("  " + "  " * depth + f"loop BB{head}-BB{back}: per iteration {describe(span(blocks, head, back))}, "
                  f"its own {describe(own)}")
    if not count:
        print("aco_loops.py: no ACO dump found (RADV_DEBUG=shaders on a RADV device)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
