#!/usr/bin/env python3
"""Compare kernels' SASS by opcode counts: whether a change moved work off the uniform datapath or added moves.

Input: the text of `cuobjdump -sass BINARY` (the GPU machine has cuobjdump; here, the local toolkit has none, but the
`nvidia-cuda-cuobjdump` wheel carries one: `pip download --no-deps nvidia-cuda-cuobjdump`, unzip, nvidia/cu13/bin/;
it reads the build's object files, e.g. build-cuda/src/kernels/cuda/CMakeFiles/penstock_cuda.dir/*.o), and substrings
of the mangled kernel names to pick. For every matching function of every file, prints its instruction count, the
highest vector register it names, and the counts of the opcodes given with --ops (default: the ones that showed
session 29's persistent attention kernel losing its uniform registers: IMAD, R2UR, UIADD3, ULEA, BSSY, BRA, SHFL,
HGMMA / QGMMA), side by side for the files. Opcode = the mnemonic before its first '.', predicates dropped.

  cuobjdump -sass bin/penstock_bench_kernels > new.sass      # on the GPU machine, once per build
  tools/sass_opcounts.py new.sass old.sass --kernel attention_fp8_kernelILi192ELi128E13__nv_bfloat16Lb1E
"""
import argparse
import collections
import re
import sys

DEFAULT_OPS = ["IMAD", "R2UR", "UIADD3", "ULEA", "UMOV", "BSSY", "BRA", "SHFL", "HGMMA", "QGMMA", "FFMA", "MUFU"]
INSTR = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]*)?")
REG = re.compile(r"\bR(\d+)\b")


def functions(path, pattern):
    """{function name: [instruction lines]} for the functions of a cuobjdump -sass text whose name holds pattern."""
    out, name = {}, None
    with open(path, errors="replace") as f:
        for line in f:
            if "Function : " in line:
                fn = line.split("Function : ", 1)[1].strip()
                name = fn if pattern in fn else None
                if name is not None:
                    out[name] = []
            elif name is not None and INSTR.match(line):
                out[name].append(line)
    return out


def summary(lines):
    ops = collections.Counter()
    max_reg = -1
    for line in lines:
        m = INSTR.match(line)
        ops[m.group(2)] += 1
        for r in REG.findall(line.split(";", 1)[0]):
            max_reg = max(max_reg, int(r))
    return len(lines), max_reg, ops


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", help="cuobjdump -sass texts (the first is printed first)")
    ap.add_argument("--kernel", required=True, help="substring of the mangled kernel name")
    ap.add_argument("--ops", default=",".join(DEFAULT_OPS), help="comma-separated opcodes to count")
    args = ap.parse_args()
    ops = [o for o in args.ops.split(",") if o]
    per_file = [functions(p, args.kernel) for p in args.files]
    names = sorted({n for fs in per_file for n in fs})
    if not names:
        print(f"no function matches {args.kernel!r}", file=sys.stderr)
        return 1
    for name in names:
        print(name)
        rows = [("instructions", "max R")] + [(o, "") for o in ops]
        cols = []
        for fs in per_file:
            if name not in fs:
                cols.append(["-"] * (len(ops) + 2))
                continue
            n, max_reg, counts = summary(fs[name])
            cols.append([str(n), str(max_reg)] + [str(counts.get(o, 0)) for o in ops])
        labels = ["instructions", "max register"] + ops
        width = max(len(p) for p in args.files)
        print("  " + " " * 14 + "".join(f"{p:>{max(width, 10) + 2}}" for p in args.files))
        for i, label in enumerate(labels):
            print(f"  {label:14s}" + "".join(f"{c[i]:>{max(width, 10) + 2}}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
