#!/usr/bin/env python3
"""Checks the shared-memory rule of the cooperative kernels (shaders/coopmat.glsl, CM_SHARED_COUNT).

Every `shared` array of a shader that includes coopmat.glsl (and of coopmat.glsl itself) is
declared with CM_SHARED_COUNT(count, bytes per element), or has 16-byte elements (CM_PACKED, uvec4,
vec4): its size is then a multiple of 16 bytes, and every array a driver places after it starts
16-byte aligned, as cooperative loads and stores need. A lone scalar or an array of another size
may move every array placed after it: on NVIDIA's driver a lone uint did, and the cooperative
feature map read every operand from 4 bytes below where it was written.

    python3 tools/shader_lint.py [SHADER_DIR]   exit 1 and a line per violation
    python3 tools/shader_lint.py --self-test    the checker against declarations it must accept and reject
"""
import os
import re
import sys

SIXTEEN_BYTE_TYPES = {"CM_PACKED", "uvec4", "vec4", "ivec4"}
DECL = re.compile(r"^\s*shared\s+(\w+)\s+(\w+)\s*(\[(.*)\])?\s*;\s*$")


def top_level(text, chars):
    """True when one of chars appears in text outside parentheses."""
    depth = 0
    for c in text:
        depth += c == "("
        depth -= c == ")"
        if depth == 0 and c in chars:
            return True
    return False


def violations(text, name):
    """(line number, message) for each shared declaration that breaks the rule."""
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("//", 1)[0]
        if not re.match(r"^\s*shared\b", code):
            continue
        m = DECL.match(code)
        if not m or (m.group(4) is not None and top_level(m.group(4), ",[]")):
            out.append((number, f"{name}:{number}: a shared declaration this check cannot read (one per line, "
                                f"`shared TYPE NAME[CM_SHARED_COUNT(count, bytes)];`): {line.strip()}"))
            continue
        type_, var, bracket, size = m.groups()
        if type_ in SIXTEEN_BYTE_TYPES and bracket:
            continue
        if not bracket:
            out.append((number, f"{name}:{number}: `{var}` is a lone {type_}: declare an array of "
                                f"CM_SHARED_COUNT(1u, bytes) elements and use element 0"))
        elif not size.strip().startswith("CM_SHARED_COUNT("):
            out.append((number, f"{name}:{number}: `{var}[{size.strip()}]` is not sized by CM_SHARED_COUNT(count, bytes)"))
    return out


def includes_coopmat(text):
    return re.search(r'^\s*#include\s+"coopmat\.glsl"', text, re.M) is not None


def check_dir(directory):
    problems = []
    for entry in sorted(os.listdir(directory)):
        if not entry.endswith((".comp", ".glsl")):
            continue
        text = open(os.path.join(directory, entry), encoding="utf-8").read()
        if entry == "coopmat.glsl" or includes_coopmat(text):
            problems += [message for _, message in violations(text, entry)]
    return problems


def self_test():
    good = '#include "coopmat.glsl"\nshared CM_OPERAND op_pool[CM_SHARED_COUNT(OP_POOL, 2u)];\n' \
           'shared CM_PACKED pool_v[OPS / 8u];\nshared float f[CM_SHARED_COUNT(F_POOL, 4u)];  // comment\n' \
           '// shared uint not_code;\n'
    bad = {
        "shared uint x_max_bits;": "lone",
        "shared float den_s[TILE_M];": "not sized",
        "shared float a[4], b[4];": "cannot read",
    }
    assert violations(good, "good") == [], violations(good, "good")
    for line, expect in bad.items():
        found = violations('#include "coopmat.glsl"\n' + line + "\n", "bad")
        assert len(found) == 1 and expect in found[0][1], (line, found)
    assert includes_coopmat(good) and not includes_coopmat("shared uint lone;\n")
    print("shader_lint self-test: ok")


def main(argv):
    if argv[1:] == ["--self-test"]:
        self_test()
        return 0
    directory = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "shaders")
    problems = check_dir(directory)
    for p in problems:
        print(p)
    if problems:
        print(f"shader_lint: {len(problems)} shared declaration(s) break the rule of shaders/coopmat.glsl (CM_SHARED_COUNT)")
        return 1
    print("shader_lint: every shared array of the cooperative kernels is a multiple of 16 bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
