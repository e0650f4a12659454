#!/usr/bin/env bash
# Full fine-tuning against LoRA (r 8), 2 processes, in one run: per-rank optimizer-state bytes and model-state bytes
# (parameters + gradients + optimizer state, from accel_accelerator_get_memory_stats_json after the last optimizer
# step), parameter bytes (the frozen base included: sharded under FULL_SHARD), the process's peak RSS and the median
# step time of the 8-block GPT of bench_shard_step ("gpt": every parameter trains; "gpt_lora":
# adapters on c_attn, PEFT's default for gpt2; "gpt_lora_all": on every linear layer), under DDP and FSDP
# FULL_SHARD, each with its ratio to full fine-tuning under the same strategy. Rounds interleave the rows.
# Usage: bash bench/lora_memory.sh [BUILD_DIR] [STEPS] [WARMUP] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-10}
warmup=${3:-2}
repeats=${4:-3}
python3 - "$build" "$steps" "$warmup" "$repeats" <<'PY'
import json, os, re, subprocess, sys
build, steps, warmup = sys.argv[1:4]
repeats = int(sys.argv[4])
env = dict(os.environ, OMP_NUM_THREADS="1")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    env.pop(k, None)
full = ('{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", '
        '"transformer_cls_names_to_wrap": ["gpt_block"]}}')
strategies = [("DDP", "{}"), ("FULL_SHARD", full)]
models = [("full fine-tuning", "gpt"), ("LoRA r 8, c_attn", "gpt_lora"), ("LoRA r 8, all-linear", "gpt_lora_all")]
runs = {}
for _ in range(repeats):
    for sname, cfg in strategies:
        for mname, model in models:
            cmd = [os.path.join(build, "bin", "accel"), "launch", "-q", "-n", "2", "--main_process_port", "0",
                   "--num_cpu_threads_per_process", "1", os.path.join(build, "bench", "bench_shard_step"),
                   model, steps, warmup, cfg]
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if out.returncode != 0:
                sys.exit("%s failed:\n%s" % (" ".join(cmd), out.stdout))
            stats = [(float(m.group(1)), json.loads(m.group(2)))
                     for m in re.finditer(r"shard_step rank \d+ median_step_ms ([\d.]+) memory (\{.*\})", out.stdout)]
            ranks = [(t, s["models"][0], s["peak_rss_bytes"]) for t, s in stats]
            if len(ranks) != 2:
                sys.exit("expected 2 result lines from %s:\n%s" % (" ".join(cmd), out.stdout))
            runs.setdefault((sname, mname), []).append((max(r[0] for r in ranks),
                                                        max(r[1]["optimizer_state_bytes"] for r in ranks),
                                                        max(r[1]["model_state_bytes"] for r in ranks),
                                                        max(r[1]["parameter_bytes"] for r in ranks),
                                                        max(r[2] for r in ranks)))
med = lambda xs: (sorted(xs)[(len(xs) - 1) // 2] + sorted(xs)[len(xs) // 2]) / 2
print("GPT 8 x 256 (2 processes, %s steps after %s warm-up, %d round(s); per rank, the larger of the two)"
      % (steps, warmup, repeats))
print("| strategy | training | optimizer state KiB | x full | model state KiB | x full | parameters KiB | peak RSS MiB "
      "| step ms | x full |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for sname, _ in strategies:
    base = runs[(sname, models[0][0])]
    for mname, _ in models:
        mine = runs[(sname, mname)]
        print("| %s | %s | %.1f | %.4f | %.1f | %.3f | %.1f | %.1f | %.1f | %.2f |" % (
            sname, mname, mine[0][1] / 1024, mine[0][1] / base[0][1], mine[0][2] / 1024, mine[0][2] / base[0][2],
            mine[0][3] / 1024, med([m[4] for m in mine]) / 2**20,
            med([m[0] for m in mine]), med([m[0] / b[0] for m, b in zip(mine, base)])))
PY
