#!/usr/bin/env bash
# OpenBLAS's generic kernels (what it chooses for a CPU it does not know) against the ones accel launch names
# with OPENBLAS_CORETYPE (BENCHMARKS.md, "BLAS kernels"): the median DDP step (2 processes under accel launch)
# and one process alone, fp32, one thread per process, for the medium MLP, the 8-block transformer and the
# 8-block GPT of bench_shard_step, interleaved over ROUNDS rounds, with the ratio generic / named.
# Usage: bash bench/blas_kernels.sh [BUILD_DIR] [ROUNDS] [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-3}
steps=${3:-20}
python3 - "$build" "$rounds" "$steps" <<'PY'
import os, re, subprocess, sys
build, rounds, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3]
env = dict(os.environ, OMP_NUM_THREADS="1")
env.pop("OPENBLAS_CORETYPE", None)
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    env.pop(k, None)
accel = os.path.join(build, "bin", "accel")
info = subprocess.run([accel, "env"], env=env, stdout=subprocess.PIPE, text=True, check=True).stdout
m = re.search(r"- OpenBLAS kernels: (\w+)(?:.*OPENBLAS_CORETYPE=(\w+) set before)?", info)
if not m or not m.group(2):
    sys.exit("OpenBLAS chose kernels for this CPU itself (%s): nothing to compare" % (m.group(1) if m else "no OpenBLAS"))
cores = (m.group(1), m.group(2))
prog = os.path.join(build, "bench", "bench_shard_step")
def step_ms(core, model, launched):
    cmd = ([accel, "launch", "-q", "-n", "2", "--main_process_port", "0", "--num_cpu_threads_per_process", "1"]
           if launched else []) + [prog, model, steps, "3", "{}"]
    out = subprocess.run(cmd, env=dict(env, OPENBLAS_CORETYPE=core), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    ms = [float(x) for x in re.findall(r"median_step_ms ([\d.]+)", out.stdout)]
    if out.returncode != 0 or len(ms) != (2 if launched else 1):
        sys.exit("%s failed:\n%s" % (" ".join(cmd), out.stdout))
    return max(ms)
models = ("mlp", "transformer", "gpt")
runs = {}
for _ in range(rounds):
    for model in models:
        for launched in (False, True):
            for core in cores:
                runs.setdefault((model, launched, core), []).append(step_ms(core, model, launched))
med = lambda xs: (sorted(xs)[(len(xs) - 1) // 2] + sorted(xs)[len(xs) // 2]) / 2
print("OpenBLAS kernels: %s (chosen) vs %s (OPENBLAS_CORETYPE); %s steps, %d round(s), median step ms" % (
    cores[0], cores[1], steps, rounds))
print("| model | processes | %s ms | %s ms | %s / %s per round | median |" % (cores + cores))
print("| --- | --- | --- | --- | --- | --- |")
for model in models:
    for launched in (False, True):
        a, b = runs[(model, launched, cores[0])], runs[(model, launched, cores[1])]
        ratios = [x / y for x, y in zip(a, b)]
        print("| %s | %s | %.1f | %.1f | %s | %.2f |" % (model, "2 (DDP)" if launched else "1", med(a), med(b),
                                                        " ".join("%.2f" % r for r in ratios), med(ratios)))
PY
