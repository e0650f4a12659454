#!/usr/bin/env python3
"""Checks that splitting a README into docs/ lost no text: every sentence of the old README (a git revision's
README.md) must appear in the new README.md, docs/**/*.md or CHANGELOG.md, up to whitespace and link syntax
(a moved "see "X"" becomes a link to X's page). Usage: scripts/docs_check_moved.py REVISION. Prints what is missing, per
section of the old README; exit 1 if anything is."""
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def normal(text):
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"(?m)^```\w*$", "\n", text)                 # fences (blocks were split or joined)
    text = re.sub(r"(?m)^(#+ |- )", "\n", text)                 # headings and bullets end a sentence
    text = " ".join(text.split(" "))
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)       # [text](link) -> text
    text = text.replace("BENCHMARKS.md", "BENCHMARKS")
    text = re.sub(r'"([^"]{1,80})"', r"\1", text)              # "Section" -> Section (quotes became links)
    return text


def main():
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    old = subprocess.run(["git", "-C", ROOT, "show", rev + ":README.md"], capture_output=True, text=True,
                         check=True).stdout
    corpus = [open(os.path.join(ROOT, "README.md")).read(), open(os.path.join(ROOT, "CHANGELOG.md")).read()]
    corpus += [open(p).read() for p in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True)]
    # The generated parts (each command's --help) are in the staged site when scripts/docs.sh has run.
    corpus += [open(p).read() for p in glob.glob(os.path.join(ROOT, "build", "docs-src", "docs", "**", "*.md"),
                                                 recursive=True)]
    new = " ".join(normal("\n".join(corpus)).split())
    missing, total, section = {}, 0, "(top)"
    for block in re.split(r"\n(?=## )", old):
        if block.startswith("## "):
            section = block.split("\n", 1)[0][3:]
        pieces = []
        for paragraph in normal(block).split("\n"):
            pieces += re.split(r"(?<=[.:;])\s+(?=[A-Z`(*])", " ".join(paragraph.split()))
        for sentence in pieces:
            if len(sentence) < 12:
                continue
            total += 1
            if sentence not in new:
                missing.setdefault(section, []).append(sentence)
    for section, sentences in missing.items():
        print("## %s: %d sentences missing" % (section, len(sentences)))
        for s in sentences:
            print("  - " + s[:300])
    n = sum(len(v) for v in missing.values())
    print("%d of %d sentences of %s:README.md not found" % (n, total, rev))
    return 1 if n else 0


if __name__ == "__main__":
    sys.exit(main())
