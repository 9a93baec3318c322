#!/usr/bin/env python3
"""Freeze the specializations a run of the library dumped (PSK_SHADER_DUMP=dir) into modules that
PSK_SHADER_REPLACE=dir loads in their place (lib/vk/shader_replacement.hpp).

For every <variant>@<values>.spec in the dump directory, the variant's module <variant>.spv is
given the specialization's constants as defaults and run through spirv-opt:

    --set-spec-const-default-value "<id>:<value> ..." --freeze-spec-const
    --fold-spec-const-op-composite -O --loop-unroll -O

so that what the driver receives has literals where the specialization constants were, the loops
whose trip counts those fixed unrolled and the arrays they indexed split into scalars: the work a
driver is expected to do after specialization, done before it. Timing a kernel both ways tells
whether a driver loses speed on specialization constants (docs/GPU_RUN.md, "Frozen
specializations"). Each result is validated with spirv-val where one is found.

    python3 tools/freeze_shaders.py DUMP_DIR OUT_DIR [--spirv-opt PATH] [--spirv-val PATH]
                                    [--only REGEX] [--target-env vulkan1.1]

Prints one line per specialization (words, loops and function-scope arrays before and after) and
exits 1 when one could not be frozen or validated. Needs spirv-opt (SPIRV-Tools); the KHR
cooperative-matrix variants need one that knows the extension (tools/install_build_tools.sh puts
SPIRV-Tools 2025 into .venv-build/, which is looked for first). Standard library only.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys

MAGIC = 0x07230203
OP_TYPE_INT, OP_TYPE_FLOAT, OP_TYPE_ARRAY, OP_TYPE_POINTER = 21, 22, 28, 32
OP_SPEC_TRUE, OP_SPEC_FALSE, OP_SPEC_CONSTANT = 48, 49, 50
OP_VARIABLE, OP_DECORATE, OP_LOOP_MERGE = 59, 71, 246
DECORATION_SPEC_ID = 1
STORAGE_FUNCTION = 7


def words_of(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) % 4 or len(data) < 20:
        raise ValueError(f"{path}: not a SPIR-V module")
    words = struct.unpack(f"<{len(data) // 4}I", data)
    if words[0] != MAGIC:
        raise ValueError(f"{path}: not a SPIR-V module (magic)")
    return words


def instructions(words):
    i = 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            raise ValueError("malformed SPIR-V instruction stream")
        yield op, words[i + 1:i + count]
        i += count


def module_facts(words):
    """Spec constants by SpecId: (kind, bits, signed) with kind 'bool', 'int' or 'float'; and counts
    of loops and function-scope array variables."""
    spec_ids, types, spec_types = {}, {}, {}
    pointers, loops, arrays = {}, 0, 0
    for op, a in instructions(words):
        if op == OP_DECORATE and len(a) >= 3 and a[1] == DECORATION_SPEC_ID:
            spec_ids[a[0]] = a[2]
        elif op == OP_TYPE_INT:
            types[a[0]] = ("int", a[1], bool(a[2]))
        elif op == OP_TYPE_FLOAT:
            types[a[0]] = ("float", a[1], True)
        elif op == OP_TYPE_ARRAY:
            types[a[0]] = ("array", 0, False)
        elif op == OP_TYPE_POINTER:
            pointers[a[0]] = (a[1], a[2])
        elif op in (OP_SPEC_TRUE, OP_SPEC_FALSE):
            spec_types[a[1]] = ("bool", 1, False)
        elif op == OP_SPEC_CONSTANT:
            spec_types[a[1]] = types.get(a[0], ("int", 32, False))
        elif op == OP_LOOP_MERGE:
            loops += 1
        elif op == OP_VARIABLE and len(a) >= 3 and a[2] == STORAGE_FUNCTION:
            pointee = pointers.get(a[0], (0, 0))[1]
            if types.get(pointee, ("",))[0] == "array":
                arrays += 1
    by_spec_id = {sid: spec_types[rid] for rid, sid in spec_ids.items() if rid in spec_types}
    return by_spec_id, loops, arrays


def literal(kind, bits, signed, value):
    if kind == "bool":
        return "true" if value else "false"
    if kind == "float":
        return repr(struct.unpack("<f", struct.pack("<I", value))[0])
    if signed and value >= 1 << 31:
        return str(value - (1 << 32))
    return str(value)


def find_tool(name, given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    venv = os.path.join(here, "..", ".venv-build", "bin", name)
    if os.access(venv, os.X_OK):
        return os.path.normpath(venv)
    return shutil.which(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dump_dir")
    ap.add_argument("out_dir")
    ap.add_argument("--spirv-opt")
    ap.add_argument("--spirv-val")
    ap.add_argument("--only", help="freeze only the stems this regular expression matches")
    ap.add_argument("--target-env", default="vulkan1.1")
    args = ap.parse_args()
    opt = find_tool("spirv-opt", args.spirv_opt)
    val = find_tool("spirv-val", args.spirv_val)
    if not opt:
        sys.exit("freeze_shaders.py: no spirv-opt (install spirv-tools, or tools/install_build_tools.sh)")
    os.makedirs(args.out_dir, exist_ok=True)
    specs = sorted(f[:-5] for f in os.listdir(args.dump_dir) if f.endswith(".spec"))
    if args.only:
        specs = [s for s in specs if re.search(args.only, s)]
    if not specs:
        sys.exit(f"freeze_shaders.py: no <variant>@<values>.spec in {args.dump_dir}")
    failed = 0
    modules = {}  # variant -> (words, facts): a variant's module serves all its specializations
    print(f"# spirv-opt {opt}; spirv-val {val or 'none'}")
    print("# specialization: words, loops, function-scope arrays (before -> after)")
    for stem in specs:
        variant = stem.split("@", 1)[0]
        module = os.path.join(args.dump_dir, variant + ".spv")
        out = os.path.join(args.out_dir, stem + ".spv")
        try:
            with open(os.path.join(args.dump_dir, stem + ".spec")) as f:
                values = {int(k): int(v) for k, v in (item.split(":") for item in f.read().split())}
            if variant not in modules:
                words = words_of(module)
                modules[variant] = (words, module_facts(words))
            words, (spec_kinds, loops, arrays) = modules[variant]
            defaults = " ".join(f"{sid}:{literal(*spec_kinds[sid], values[sid])}"
                                for sid in sorted(spec_kinds) if sid in values)
            cmd = [opt, "--set-spec-const-default-value", defaults, "--freeze-spec-const",
                   "--fold-spec-const-op-composite", "-O", "--loop-unroll", "-O", module, "-o", out]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError("spirv-opt: " + (r.stderr or r.stdout).strip()[:400])
            if val:
                r = subprocess.run([val, "--target-env", args.target_env, out], capture_output=True, text=True)
                if r.returncode != 0:
                    os.remove(out)
                    raise RuntimeError("spirv-val: " + (r.stderr or r.stdout).strip()[:400])
            after = words_of(out)
            left, loops2, arrays2 = module_facts(after)
            print(f"{stem}: words {len(words)} -> {len(after)}, loops {loops} -> {loops2}, arrays {arrays} -> {arrays2}"
                  + (f", {len(left)} specialization constants left" if left else ""))
        except (OSError, ValueError, RuntimeError, KeyError) as e:
            failed += 1
            print(f"{stem}: FAILED: {e}")
    print(f"# {len(specs) - failed} of {len(specs)} frozen into {args.out_dir}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
