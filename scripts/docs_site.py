#!/usr/bin/env python3
"""Stages docs/ with its generated parts and builds the site; see scripts/docs.sh. Usage: docs_site.py BUILD_DIR."""
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = ("launch", "config", "env", "estimate-memory", "merge-weights", "test")
errors = []
STAGE_DOCS = None
NOT_VARIABLES = {"ACCEL_OK", "ACCEL_API", "ACCEL_STATIC", "ACCEL_BUILDING", "ACCEL_NODISCARD", "ACCEL_NOEXCEPT",
                 "ACCEL_BEGIN_DECLS", "ACCEL_END_DECLS", "ACCEL_DEPRECATED", "ACCEL_SANITIZE", "ACCEL_FUZZ",
                 "ACCEL_FUZZ_SECONDS", "ACCEL_WERROR", "LOCAL_STATE_DICT"}
NOT_VARIABLE_PREFIXES = ("ACCEL_ERR_", "ACCEL_DTYPE_", "ACCEL_VERSION_", "ACCEL_ABI_", "ACCEL_MIXED_PRECISION_",
                         "ACCEL_TRACKER_EVENT_", "ACCEL_BUILD_")


def fail(msg):
    errors.append(msg)
    print("docs: " + msg, file=sys.stderr)


def command_help(accel, text):
    """`<!-- accel-help: CMD -->` becomes CMD's --help as the built binary prints it (never pasted by hand)."""
    def sub(m):
        p = subprocess.run([accel, m.group(1), "--help"], capture_output=True, text=True)
        if p.returncode != 0:
            fail("accel %s --help exited %d: %s" % (m.group(1), p.returncode, p.stderr))
        return "`accel %s --help`:\n\n```\n%s```" % (m.group(1), p.stdout)
    return re.sub(r"<!-- accel-help: ([a-z-]+) -->", sub, text)


def status_table(text):
    """`<!-- accel-statuses -->` becomes the table of include/accel/status.h's codes and their meaning."""
    src = open(os.path.join(ROOT, "include/accel/status.h")).read()
    rows = re.findall(r"(ACCEL_(?:OK|ERR_[A-Z_]+)) = (\d+),?\s*(?:/\*\*< (.*?) \*/)?", src)
    table = "| code | status | meaning |\n| --- | --- | --- |\n" + "".join(
        "| %s | `%s` | %s |\n" % (num, name, what or "success") for name, num, what in rows)
    return text.replace("<!-- accel-statuses -->", table)


def config_defaults(build, text):
    """`<!-- accel-config-defaults -->` becomes every accelerator config key with its type and default, as the
    built library reports its effective configuration (scripts/docs_config_keys.py, in a clean environment)."""
    if "<!-- accel-config-defaults -->" not in text:
        return text
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCELERATE_", "FSDP_", "OMPI_", "PMI_", "SLURM_", "MASTER_", "LOCAL_"))
           and k not in ("RANK", "WORLD_SIZE")}
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "docs_config_keys.py"), build],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        fail("scripts/docs_config_keys.py: %s" % p.stderr)
        return text
    config = json.loads(p.stdout)
    config.pop("process", None)   # facts about the process, not configuration
    rows = []

    def walk(prefix, value):
        if isinstance(value, dict) and value:
            for k, v in value.items():
                walk(prefix + "." + k if prefix else k, v)
            return
        kind = {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
                dict: "object", type(None): "null (unset)"}[type(value)]
        rows.append("| `%s` | %s | `%s` |" % (prefix, kind, json.dumps(value)))
    walk("", config)
    table = "| key (Accelerate's name) | type | default |\n| --- | --- | --- |\n" + "\n".join(rows) + "\n"
    return text.replace("<!-- accel-config-defaults -->", table)


def environment_index(pages, text):
    """`<!-- accel-environment -->` becomes every environment variable the pages name, with the pages naming it."""
    found = {}
    for rel, body in pages.items():
        for var in set(re.findall(r"\b((?:ACCEL|ACCELERATE|FSDP|OMPI_COMM_WORLD|MASTER|LOCAL|OPENBLAS|HF|PMI|SLURM)"
                                  r"_[A-Z0-9_]*[A-Z0-9]|RANK|WORLD_SIZE|OMP_NUM_THREADS|CUDA_VISIBLE_DEVICES)\b", body)):
            found.setdefault(var, set()).add(rel)
    # C constants and CMake options share the prefix; they are not variables.
    for var in [v for v in found if v in NOT_VARIABLES or (v.startswith(NOT_VARIABLE_PREFIXES) and v != "ACCEL_BUILD_DIR")]:
        del found[var]
    titles = {rel: (re.match(r"# (.*)", body) or [None, rel])[1] for rel, body in pages.items()}
    lines = ["| variable | documented on |", "| --- | --- |"]
    for var in sorted(found):
        links = ", ".join("[%s](%s)" % (titles[r], os.path.relpath(r, "reference")) for r in sorted(found[var]))
        lines.append("| `%s` | %s |" % (var, links))
    return text.replace("<!-- accel-environment -->", "\n".join(lines) + "\n")


def plots():
    """The headline benchmark plots, drawn by scripts/docs_plots.py from BENCHMARKS.md's tables."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import docs_plots
    out = os.path.join(STAGE_DOCS, "development", "img")
    os.makedirs(out, exist_ok=True)
    try:
        docs_plots.plot_all(open(os.path.join(ROOT, "BENCHMARKS.md")).read(), out)
    except ValueError as e:
        fail("scripts/docs_plots.py: %s" % e)


def header_doc_paths():
    """Header comments point at doc pages (docs/....md); each must exist."""
    for name in sorted(os.listdir(os.path.join(ROOT, "include/accel"))):
        body = open(os.path.join(ROOT, "include/accel", name)).read()
        for path in re.findall(r"\bdocs/[\w/.-]+\.md", body):
            if not os.path.exists(os.path.join(ROOT, path)):
                fail("include/accel/%s points at %s, which does not exist" % (name, path))
        if "README" in body:
            fail("include/accel/%s points at the README; point at a page under docs/" % name)


def doxygen(out_dir):
    log = os.path.join(os.path.dirname(out_dir), "doxygen-warnings.log")
    env = dict(os.environ, ACCEL_DOXYGEN_OUT=out_dir, ACCEL_DOXYGEN_LOG=log,
               ACCEL_HEADERS=os.path.join(ROOT, "include", "accel"))
    p = subprocess.run(["doxygen", os.path.join(ROOT, "docs/Doxyfile")], cwd=ROOT, env=env,
                       capture_output=True, text=True)
    warnings = open(log).read().strip() if os.path.exists(log) else ""
    n = len([l for l in warnings.splitlines() if "warning:" in l or "error:" in l])
    print("docs: doxygen: %d warnings" % n)
    if p.returncode != 0 or warnings:
        fail("doxygen (exit %d):\n%s\n%s" % (p.returncode, warnings, p.stderr[-3000:]))


class Links(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.links, self.ids = [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("id", "name"):
            if a.get(key):
                self.ids.add(a[key])
        for key in ("href", "src"):
            if a.get(key) is not None:
                self.links.append(a[key])


def check_links(site):
    """Every relative link and anchor of the site resolves (mkdocs 1.4 checks neither anchors nor raw HTML)."""
    parsed, count = {}, 0

    def parse(path):
        if path not in parsed:
            p = Links()
            p.feed(open(path, encoding="utf-8", errors="replace").read())
            parsed[path] = p
        return parsed[path]
    for d, _, files in os.walk(site):
        for f in files:
            if not f.endswith(".html") or f == "404.html" or os.path.relpath(d, site).startswith("api"):
                continue   # Doxygen checks its own pages; 404.html links from the site root, wherever it is served
            page = os.path.join(d, f)
            for link in parse(page).links:
                if re.match(r"^[a-z]+:|^//", link) or link == "":
                    continue
                count += 1
                target, _, anchor = link.partition("#")
                target = os.path.normpath(os.path.join(d, target)) if target else page
                if os.path.isdir(target):
                    target = os.path.join(target, "index.html")
                if not os.path.exists(target):
                    fail("%s: broken link %s" % (os.path.relpath(page, site), link))
                elif anchor and target.endswith(".html") and anchor not in parse(target).ids:
                    fail("%s: link %s: no anchor #%s in %s" % (os.path.relpath(page, site), link, anchor,
                                                               os.path.relpath(target, site)))
    print("docs: %d links checked" % count)


def main():
    build = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
    accel = os.path.join(build, "bin", "accel")
    for tool in ("mkdocs", "doxygen"):
        if not shutil.which(tool):
            print("docs: skipped: %s is not installed (bash scripts/install-deps.sh installs it)" % tool)
            return 77
    try:
        import matplotlib  # noqa: F401  (the benchmark plots)
    except ImportError:
        print("docs: skipped: %s has no matplotlib (python3-matplotlib; bash scripts/install-deps.sh installs it)"
              % sys.executable)
        return 77
    if not os.access(accel, os.X_OK):
        print("docs: %s is not built (bash scripts/build.sh)" % accel, file=sys.stderr)
        return 1
    t0 = time.time()
    stage, site = os.path.join(build, "docs-src"), os.path.join(build, "docs-site")
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "docs"), os.path.join(stage, "docs"),
                    ignore=shutil.ignore_patterns("Doxyfile"))
    docs = os.path.join(stage, "docs")
    global STAGE_DOCS
    STAGE_DOCS = docs
    shutil.copy(os.path.join(ROOT, "CHANGELOG.md"), os.path.join(docs, "changelog.md"))
    shutil.copy(os.path.join(ROOT, "BENCHMARKS.md"), os.path.join(docs, "development", "benchmarks-data.md"))
    plots()  # before the pages are read: the plots page links to them
    pages = {}
    for d, _, files in os.walk(docs):
        for f in files:
            if f.endswith(".md"):
                rel = os.path.relpath(os.path.join(d, f), docs)
                pages[rel] = open(os.path.join(d, f)).read()
    for rel, text in pages.items():
        new = config_defaults(build, environment_index(pages, status_table(command_help(accel, text))))
        if new != text:
            open(os.path.join(docs, rel), "w").write(new)
    header_doc_paths()
    doxygen(docs)   # into docs/api/, so that pages' links to it are checked as any other
    config = open(os.path.join(ROOT, "mkdocs.yml")).read()
    config = re.sub(r"(?m)^docs_dir:.*$", "docs_dir: " + docs, config)
    config = re.sub(r"(?m)^site_dir:.*$", "site_dir: " + site, config)
    open(os.path.join(stage, "mkdocs.yml"), "w").write(config)
    p = subprocess.run(["mkdocs", "build", "--strict", "--clean", "-f", os.path.join(stage, "mkdocs.yml")],
                       capture_output=True, text=True)
    out = p.stdout + p.stderr
    for line in out.splitlines():
        # mkdocs 1.4 reports a page missing from the nav at INFO level; here it is an error.
        if "WARNING" in line or "ERROR" in line or "not included in the \"nav\"" in line:
            fail("mkdocs: " + line)
    if p.returncode != 0:
        fail("mkdocs build exited %d:\n%s" % (p.returncode, out))
    if os.path.isdir(site):
        check_links(site)
    print("docs: %s in %.1f s%s" % (site, time.time() - t0, "" if not errors else ", %d errors" % len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
