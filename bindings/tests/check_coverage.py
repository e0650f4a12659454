#!/usr/bin/env python3
"""Every function libaccel exports is wrapped by every binding, or excused in bindings/coverage_exclusions.txt.

    check_coverage.py --library build/libaccel.so --exclusions bindings/coverage_exclusions.txt
        [--module python=PATH] [--module java=PATH] [--module csharp=PATH] [--rust-src DIR]

The exported functions are `nm -D --defined-only` of the library. A SWIG binding (Python, Java, C#) wraps a
function when its native module calls it (`nm -D --undefined-only`: the symbol is imported); the Rust crate
when its sources call `sys::<function>`. accel.hpp is not checked: it documents partial coverage
(docs/guides/bindings/index.md). An exclusion line is `<function> <binding,binding,...> <reason>`; each needs a reason, and an
entry that no longer excuses anything (the function is wrapped there, or no longer exported) is an error too,
so the list stays true. Exits 1 listing every problem; a module not given (binding not built) is skipped.
"""

import argparse
import os
import re
import subprocess
import sys

BINDINGS = ("python", "java", "csharp", "rust")


def symbols(path, option, kind):
    """accel_* names of `nm -D <option>` lines of `kind` (T, U), without their version (accel_x@@ACCEL_1)."""
    out = subprocess.run(["nm", "-D", option, path], check=True, capture_output=True, text=True).stdout
    found = (re.search(r" %s (accel_\w+)(@|$)" % kind, line) for line in out.splitlines())
    return {m.group(1) for m in found if m}


def exported(library):
    return symbols(library, "--defined-only", "T")


def imported(module):
    return symbols(module, "--undefined-only", "U")


def rust_calls(src_dir):
    names = set()
    for root, _, files in os.walk(src_dir):
        for f in files:
            if f.endswith(".rs"):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    code = re.sub(r"//.*", "", fh.read())  # a name in a comment wraps nothing
                    names |= set(re.findall(r"\bsys::(accel_\w+)\b", code))
    return names


def read_exclusions(path, problems):
    """{(function, binding): reason} from the exclusion file; malformed lines are problems."""
    entries = {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 2)
            if len(parts) < 3:
                problems.append("%s:%d: expected '<function> <bindings> <reason>', got %r" % (path, n, line))
                continue
            func, bindings, reason = parts
            for b in bindings.split(","):
                if b not in BINDINGS:
                    problems.append("%s:%d: unknown binding %r (expected %s)" % (path, n, b, ", ".join(BINDINGS)))
                elif (func, b) in entries:
                    problems.append("%s:%d: %s is excluded for %s twice" % (path, n, func, b))
                else:
                    entries[(func, b)] = reason
    return entries


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--library", required=True)
    p.add_argument("--exclusions", required=True)
    p.add_argument("--module", action="append", default=[], help="binding=path of its native module")
    p.add_argument("--rust-src")
    a = p.parse_args()

    problems = []
    functions = exported(a.library)
    if len(functions) < 50:
        problems.append("%s exports only %d accel_* functions; is it the right library?" % (a.library, len(functions)))
    wrapped = {}
    for m in a.module:
        binding, _, path = m.partition("=")
        wrapped[binding] = imported(path)
    if a.rust_src:
        wrapped["rust"] = rust_calls(a.rust_src)
    excluded = read_exclusions(a.exclusions, problems)

    for binding in BINDINGS:
        if binding not in wrapped:
            print("%-7s skipped (not built)" % binding)
            continue
        missing = sorted(f for f in functions if f not in wrapped[binding] and (f, binding) not in excluded)
        n_excl = sum(1 for (f, b) in excluded if b == binding and f in functions)
        print("%-7s %d of %d functions wrapped, %d excluded, %d neither"
              % (binding, len(functions & wrapped[binding]), len(functions), n_excl, len(missing)))
        for f in missing:
            problems.append("%s: %s is neither wrapped nor in %s" % (binding, f, a.exclusions))
    for (f, b), reason in sorted(excluded.items()):
        if f not in functions:
            problems.append("%s: excluded for %s but not exported by %s (remove the entry)" % (f, b, a.library))
        elif b in wrapped and f in wrapped[b]:
            problems.append("%s: excluded for %s but %s wraps it (remove the entry)" % (f, b, b))
    for line in problems:
        print("FAIL " + line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
