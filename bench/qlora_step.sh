#!/usr/bin/env bash
# QLoRA (NF4 + double quantization base, adapters r 8 on every linear layer) against LoRA over a float32 base and full
# fine-tuning of the same small llama (bench/qlora_step.c), one process each: parameter bytes (the frozen base
# included), optimizer-state bytes, model-state bytes (parameters + gradients + optimizer state, from
# accel_accelerator_get_memory_stats_json after the last step), the process's peak RSS and the median step time,
# each with its ratio to full fine-tuning. Rounds interleave the modes.
# Usage: bash bench/qlora_step.sh [BUILD_DIR] [STEPS] [WARMUP] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-8}
warmup=${3:-2}
repeats=${4:-3}
python3 - "$build" "$steps" "$warmup" "$repeats" <<'PY'
import json, os, re, subprocess, sys
build, steps, warmup = sys.argv[1:4]
repeats = int(sys.argv[4])
env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
modes = [("full fine-tuning (fp32)", "full"), ("LoRA r 8, all-linear, fp32 base", "lora"),
         ("QLoRA: NF4 base, fp32 compute", "qlora"), ("QLoRA: NF4 base, bf16 compute", "qlora_bf16")]
runs = {}
for _ in range(repeats):
    for name, mode in modes:
        cmd = [os.path.join(build, "bench", "bench_qlora_step"), mode, steps, warmup]
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        m = re.search(r"qlora_step \S+ median_step_ms ([\d.]+) memory (\{.*\})", out.stdout)
        if out.returncode != 0 or m is None:
            sys.exit("%s failed:\n%s" % (" ".join(cmd), out.stdout))
        s = json.loads(m.group(2))
        runs.setdefault(mode, []).append((float(m.group(1)), s["models"][0], s["peak_rss_bytes"]))
med = lambda xs: (sorted(xs)[(len(xs) - 1) // 2] + sorted(xs)[len(xs) // 2]) / 2
print("llama 4 x 512, vocabulary 8000, batch 4 x 64 tokens, AdamW, one process, OMP_NUM_THREADS=%s (%s steps after %s "
      "warm-up, %d round(s), medians)" % (env["OMP_NUM_THREADS"], steps, warmup, repeats))
print("| training | parameters MiB | x full | optimizer state MiB | x full | model state MiB | x full | peak RSS MiB "
      "| x full | step ms | x full |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
base = runs["full"]
for name, mode in modes:
    r = runs[mode]
    p, o, ms = r[0][1]["parameter_bytes"], r[0][1]["optimizer_state_bytes"], r[0][1]["model_state_bytes"]
    bp, bo, bms = base[0][1]["parameter_bytes"], base[0][1]["optimizer_state_bytes"], base[0][1]["model_state_bytes"]
    rss, brss = med([x[2] for x in r]), med([x[2] for x in base])
    t, bt = med([x[0] for x in r]), med([x[0] for x in base])
    print("| %s | %.1f | %.3f | %.2f | %.4f | %.1f | %.3f | %.0f | %.2f | %.1f | %.2f |" % (
        name, p / 2**20, p / bp, o / 2**20, o / bo, ms / 2**20, ms / bms, rss / 2**20, rss / brss, t, t / bt))
PY
