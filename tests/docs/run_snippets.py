#!/usr/bin/env python3
"""Compiles and runs every code block of README.md and docs/ marked `<!-- test: LANGUAGE HARNESS -->` (the line
right before the block's opening fence): the block replaces the line `@SNIPPET@` of tests/docs/HARNESS, which
declares what the block uses and checks what it must do. Usage: run_snippets.py SOURCE_DIR BUILD_DIR.
Exit 0 when every marked block ran, 1 on a failure, 77 (ctest's skip) when none could run."""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

MARK = re.compile(r"^<!-- test: (\w+) (\S+) -->\n```\w*\n(.*?)^```", re.M | re.S)


def blocks(source):
    files = [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs", "**", "*.md"),
                                                                  recursive=True))
    for path in files:
        text = open(path).read()
        for m in MARK.finditer(text):
            line = text[:m.start()].count("\n") + 1
            yield os.path.relpath(path, source), line, m.group(1), m.group(2), m.group(3)


def run_c(source, build, program, tmp):
    exe = os.path.join(tmp, "snippet")
    cc = os.environ.get("CC", "cc")
    compile_cmd = [cc, "-std=c11", "-Wall", "-Wno-unused-result", "-I", os.path.join(source, "include"),
                   "-I", os.path.join(build, "include"), program, "-o", exe, "-L", build, "-laccel",
                   "-Wl,-rpath," + build, "-lm"]
    p = subprocess.run(compile_cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return "does not compile:\n" + p.stderr
    p = subprocess.run([exe], capture_output=True, text=True, timeout=300)
    print(p.stdout, end="")
    return None if p.returncode == 0 else "exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr)


def run_python(source, build, program, tmp):
    module = os.path.join(build, "bindings", "python")
    if not os.path.isdir(os.path.join(module, "accel")):
        return "skip: the Python binding is not built (%s)" % module
    env = dict(os.environ, PYTHONPATH=module)
    p = subprocess.run(["/usr/bin/python3", program], capture_output=True, text=True, timeout=300, env=env)
    print(p.stdout, end="")
    return None if p.returncode == 0 else "exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr)


RUNNERS = {"c": (run_c, ".c"), "python": (run_python, ".py")}


def main():
    source, build = (os.path.abspath(a) for a in sys.argv[1:3])
    ran, failed, skipped = 0, [], []
    for page, line, lang, harness, code in blocks(source):
        where = "%s:%d (%s, %s)" % (page, line, lang, harness)
        if lang not in RUNNERS:
            failed.append("%s: no runner for language %r (known: %s)" % (where, lang, ", ".join(RUNNERS)))
            continue
        text = open(os.path.join(source, harness)).read()
        if "@SNIPPET@" not in text:
            failed.append("%s: %s has no @SNIPPET@ line" % (where, harness))
            continue
        runner, ext = RUNNERS[lang]
        tmp = tempfile.mkdtemp(prefix="accel-docs-")
        try:
            program = os.path.join(tmp, "snippet" + ext)
            open(program, "w").write(text.replace("@SNIPPET@", code))
            print("docs: %s" % where)
            error = runner(source, build, program, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if error is None:
            ran += 1
        elif error.startswith("skip:"):
            skipped.append("%s: %s" % (where, error))
        else:
            failed.append("%s: %s" % (where, error))
    for s in skipped:
        print("docs: " + s)
    for f in failed:
        print("docs: FAILED " + f, file=sys.stderr)
    print("docs: %d marked blocks ran, %d skipped, %d failed" % (ran, len(skipped), len(failed)))
    if failed:
        return 1
    return 0 if ran else 77


if __name__ == "__main__":
    sys.exit(main())
