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


def run_java(source, build, program, tmp):
    jar = os.path.join(build, "bindings", "java", "accel.jar")
    if not os.path.exists(jar) or not shutil.which("javac"):
        return "skip: the Java binding is not built (%s) or javac is missing" % jar
    # javac wants the file named after its public class.
    named = os.path.join(tmp, "HarnessQuickTour.java")
    os.rename(program, named)
    p = subprocess.run(["javac", "-cp", jar, "-d", tmp, named], capture_output=True, text=True)
    if p.returncode != 0:
        return "does not compile:\n" + p.stderr
    p = subprocess.run(["java", "-cp", jar + ":" + tmp, "HarnessQuickTour"], capture_output=True, text=True,
                       timeout=300)
    print(p.stdout, end="")
    return None if p.returncode == 0 else "exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr)


def run_csharp(source, build, program, tmp):
    out = os.path.join(build, "bindings", "csharp")
    if not os.path.exists(os.path.join(out, "Accel.dll")) or not shutil.which("mcs") or not shutil.which("mono"):
        return "skip: the C# binding is not built (%s) or Mono is missing" % out
    exe = os.path.join(tmp, "snippet.exe")
    p = subprocess.run(["mcs", "-nologo", "-r:" + os.path.join(out, "Accel.dll"), "-out:" + exe, program],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return "does not compile:\n" + p.stdout + p.stderr
    shutil.copy(os.path.join(out, "Accel.dll"), tmp)   # Mono loads the assembly from the program's folder
    env = dict(os.environ, LD_LIBRARY_PATH=out + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    p = subprocess.run(["mono", exe], capture_output=True, text=True, timeout=300, env=env)
    print(p.stdout, end="")
    return None if p.returncode == 0 else "exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr)


def run_rust(source, build, program, tmp):
    cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    target = os.path.join(build, "bindings", "rust", "target")
    if not os.path.exists(cargo) or not os.path.isdir(target):
        return "skip: cargo is missing or the Rust crates are not built (%s)" % target
    crate = os.path.join(tmp, "quick_tour")
    os.makedirs(os.path.join(crate, "src"))
    os.rename(program, os.path.join(crate, "src", "main.rs"))
    open(os.path.join(crate, "Cargo.toml"), "w").write(
        '[package]\nname = "quick_tour"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n'
        'accel = { path = "%s" }\n\n[workspace]\n' % os.path.join(source, "bindings", "rust", "accel"))
    # The crates' own build settings (bindings/CMakeLists.txt), and their target folder, so that they are
    # not compiled again.
    env = dict(os.environ, CARGO_NET_OFFLINE="true", CARGO_TARGET_DIR=target, ACCEL_LIB_DIR=build,
               ACCEL_INCLUDE_DIRS=os.path.join(source, "include") + ":" + os.path.join(build, "include"),
               LD_LIBRARY_PATH=build + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
    if shutil.which("bindgen"):
        env["ACCEL_BINDGEN"] = shutil.which("bindgen")
    p = subprocess.run([cargo, "run", "--offline", "--quiet", "--manifest-path", os.path.join(crate, "Cargo.toml")],
                       capture_output=True, text=True, timeout=600, env=env)
    print(p.stdout, end="")
    return None if p.returncode == 0 else "exit %d:\n%s%s" % (p.returncode, p.stdout, p.stderr)


RUNNERS = {"c": (run_c, ".c"), "python": (run_python, ".py"), "java": (run_java, ".java"),
           "csharp": (run_csharp, ".cs"), "rust": (run_rust, ".rs")}


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
