#!/usr/bin/env python3
"""Plots of BENCHMARKS.md's headline tables, drawn from the tables themselves (never by hand): scripts/docs.sh
calls plot_all(BENCHMARKS.md text, output folder) and the site's "Benchmark plots" page shows the SVGs. A table
whose shape changed raises ValueError naming it, so the docs build fails instead of drawing something wrong."""
import re
import sys


def table(text, heading, first_cell):
    """The rows (lists of cells) of the first table under `## heading` whose header row starts with first_cell."""
    m = re.search(r"(?m)^## %s.*$" % re.escape(heading), text)
    if not m:
        raise ValueError("BENCHMARKS.md has no section '## %s'" % heading)
    section = text[m.end():]
    end = re.search(r"(?m)^## ", section)
    section = section[:end.start()] if end else section
    for block in re.findall(r"(?m)((?:^\|.*\|[ \t]*\n)+)", section):
        rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.strip().split("\n")]
        if rows[0][0] == first_cell:
            return rows[0], [r for r in rows[2:]]
    raise ValueError("BENCHMARKS.md, '%s': no table whose first column is '%s'" % (heading, first_cell))


def number(cell):
    m = re.match(r"\s*\**([0-9]+(?:\.[0-9]+)?)", cell)
    if not m:
        raise ValueError("not a number: %r" % cell)
    return float(m.group(1))


def row(rows, label):
    for r in rows:
        if r[0].replace("*", "") == label:
            return r
    raise ValueError("no row '%s' (rows: %s)" % (label, [r[0] for r in rows]))


def plot_all(text, out_dir):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams["svg.hashsalt"] = "accel"   # the same data gives the same file
    written = []

    def save(fig, name):
        path = "%s/%s" % (out_dir, name)
        fig.tight_layout()
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)
        written.append(name)

    # 1. Overhead of the C API: accel's step time over a hand-written LibTorch loop's, per run.
    header, rows = table(text, "Overhead", "date, machine state")
    parts = [[p.strip() for p in re.sub(r"\*|\(.*?\)", "", r[0]).split(",")] for r in rows]
    labels = ["%s, %s" % (p[0], p[-1][:24]) for p in parts]   # the date and the machine's state
    ratios = [number(r[3]) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    ax.barh(range(len(ratios)), ratios, color="#4a7ebb")
    ax.axvline(1.01, color="#c0504d", linestyle="--", label="goal: ratio ≤ 1.01")
    ax.set_yticks(range(len(ratios)), labels, fontsize=8)
    ax.set_xlabel("accel ms/step ÷ hand-written LibTorch ms/step (lower is better)")
    ax.set_xlim(0.8, 1.05)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("C API overhead, medium MLP", fontsize=10)
    save(fig, "overhead.svg")

    # 2. Data-parallel scaling: step time of 1 process and of 2 processes (Gloo, MPI), per round.
    header, rows = table(text, "Distributed", "")
    series = [("1 process", "1 process"), ("2 processes, Gloo", "2 processes, Gloo"),
              ("2 processes, MPI", "2 processes, MPI")]
    rounds = header[1:]
    fig, ax = plt.subplots(figsize=(7, 3))
    width = 0.8 / len(series)
    for i, (label, name) in enumerate(series):
        values = [number(c) for c in row(rows, name)[1:]]
        ax.bar([k + i * width for k in range(len(values))], values, width, label=label)
    ax.set_xticks([k + width for k in range(len(rounds))], rounds)
    ax.set_ylabel("median step (ms)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.3)
    ax.legend(fontsize=8, ncol=3, loc="upper left")
    ax.set_title("Data-parallel step, medium MLP, 2 cores", fontsize=10)
    save(fig, "distributed.svg")

    # 3. Sharded training: each strategy's step time over DDP's, per model.
    header, rows = table(text, "Sharded training", "strategy")
    models = [(1, "MLP"), (3, "transformer"), (5, "GPT")]
    strategies = [r for r in rows if not r[0].startswith("DDP")]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(models)
    for i, (col, name) in enumerate(models):
        xs, ys = [], []
        for k, r in enumerate(strategies):
            if r[col]:
                xs.append(k + i * width)
                ys.append(number(r[col]))
        ax.bar(xs, ys, width, label=name)
    ax.axhline(1.3, color="#c0504d", linestyle="--", label="goal: ≤ 1.3 × DDP")
    ax.axhline(1.0, color="#808080", linewidth=0.8)
    ax.set_xticks([k + width for k in range(len(strategies))], [r[0] for r in strategies], rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylabel("step time ÷ DDP's (median)")
    ax.set_ylim(0, 1.7)
    ax.legend(fontsize=8, ncol=4, loc="upper left")
    ax.set_title("Sharded training, 2 processes", fontsize=10)
    save(fig, "sharded.svg")

    # 4. accel against the real Python Accelerate: median steps/s of the same training, per case.
    header, rows = table(text, "accel vs Python Accelerate", "case")
    sides = [(1, "accel (C API)", "#4a7ebb"), (2, "Python Accelerate 0.24.1", "#9bbb59")]
    fig, ax = plt.subplots(figsize=(7, 2.8))
    width = 0.8 / len(sides)
    for i, (col, name, color) in enumerate(sides):
        ax.bar([k + i * width for k in range(len(rows))], [number(r[col]) for r in rows], width, label=name,
               color=color)
    for k, r in enumerate(rows):   # the ratio above each pair, as the table gives it
        top = max(number(r[1]), number(r[2]))
        ax.annotate("× %s" % r[3].replace("*", ""), (k + width / 2, top), textcoords="offset points",
                    xytext=(0, 3), ha="center", fontsize=8)
    ax.set_xticks([k + width / 2 for k in range(len(rows))], [r[0] for r in rows])
    ax.set_ylabel("median steps/s (higher is better)")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.25)
    ax.legend(fontsize=8, loc="upper right")
    ax.set_title("Same MLP training, accel vs Accelerate, 1 thread per process", fontsize=10)
    save(fig, "vs_accelerate.svg")
    return written


if __name__ == "__main__":
    print(plot_all(open(sys.argv[1]).read(), sys.argv[2]))
