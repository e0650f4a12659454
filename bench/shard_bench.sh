#!/usr/bin/env bash
# Sharded training against DDP, 2 processes, in one run: per-rank model-state bytes (parameters + gradients +
# optimizer state, from accel_accelerator_get_memory_stats_json after the last optimizer step), peak RSS and
# median step time of DDP, ZeRO-1, ZeRO-2, ZeRO-3 and FSDP FULL_SHARD (also with prefetching, and with bf16
# parameters and communication against DDP under bf16 autocast), for the medium MLP, an 8-block transformer
# and an 8-block GPT (also with hf_ds_config's "auto" sizes, filled from its hidden size), each with its ratio
# to DDP's (the bf16 rows: to DDP bf16's). Usage: bash bench/shard_bench.sh [BUILD_DIR] [STEPS] [WARMUP]
# [REPEATS] (BENCH_MODELS="mlp" to run some of the models only, BENCH_ROWS="ZeRO-3,FULL_SHARD" some of the
# rows: their baselines run too).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
steps=${2:-10}
warmup=${3:-2}
repeats=${4:-1}
python3 - "$build" "$steps" "$warmup" "$repeats" <<'PY'
import json, os, re, subprocess, sys
build, steps, warmup = sys.argv[1:4]
repeats = int(sys.argv[4])
env = dict(os.environ, OMP_NUM_THREADS="1")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    env.pop(k, None)
for model in os.environ.get("BENCH_MODELS", "mlp transformer gpt").split():
    block = {"transformer": "transformer_encoder_layer", "gpt": "gpt_block"}.get(model)
    wrap = ('"auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "transformer_cls_names_to_wrap": ["%s"]' % block
            if block else '"auto_wrap_policy": "NO_WRAP"')
    full = '"sharding_strategy": "FULL_SHARD", "sync_module_states": true, %s' % wrap
    # (name, config, the row its ratios are to): bf16 sharding (16-bit parameters and communication) against
    # DDP under bf16 autocast.
    configs = [("DDP", "{}", "DDP"),
               ("ZeRO-1", '{"deepspeed_plugin": {"zero_stage": 1}}', "DDP"),
               ("ZeRO-2", '{"deepspeed_plugin": {"zero_stage": 2}}', "DDP"),
               ("ZeRO-3", '{"deepspeed_plugin": {"zero_stage": 3}}', "DDP"),
               # ZeRO-3 with the fewest parameters gathered at once: nothing fetched ahead (one layer gathered at a
               # time) and every layer but the last gathered again for its backward (DeepSpeed's defaults, the row
               # above, gather buckets of layers and keep them from forward to backward).
               ("ZeRO-3 lean", '{"deepspeed_plugin": {"hf_ds_config": {"zero_optimization": {"stage": 3, '
                '"stage3_prefetch_bucket_size": 0, "stage3_max_reuse_distance": 0}}}}', "DDP"),
               ("FULL_SHARD", '{"fsdp_plugin": {%s}}' % full, "DDP"),
               ("FULL_SHARD prefetch", '{"fsdp_plugin": {%s, "forward_prefetch": true, "backward_prefetch": "BACKWARD_PRE"}}' % full, "DDP"),
               ("DDP bf16", '{"mixed_precision": "bf16"}', "DDP bf16"),
               ("FULL_SHARD bf16", '{"mixed_precision": "bf16", "fsdp_plugin": {%s, "backward_prefetch": "BACKWARD_PRE"}}' % full, "DDP bf16")]
    if model == "gpt":
        # Hugging Face's "auto" sizes, which Accelerate (and accel) fill from the hidden size for this model:
        # buckets of h^2 (each block alone), 0.9 h^2 ahead, parameters of at most 10 h kept gathered.
        auto = ", ".join('"%s": "auto"' % k for k in ("reduce_bucket_size", "stage3_prefetch_bucket_size",
                                                      "stage3_param_persistence_threshold"))
        configs.insert(5, ("ZeRO-3 auto", '{"deepspeed_plugin": {"hf_ds_config": {"zero_optimization": '
                           '{"stage": 3, %s}}}}' % auto, "DDP"))
    only = [r for r in os.environ.get("BENCH_ROWS", "").split(",") if r]
    if only:
        wanted = set(only) | {c[2] for c in configs if c[0] in only}
        configs = [c for c in configs if c[0] in wanted]
    # BENCH_REPEATS rounds, each running every configuration once in turn, so that a row and its baseline
    # are measured minutes apart at most: the host's speed drifts by more than the differences measured here.
    # Step time is the median over rounds, its ratio the median of each round's ratio to that round's baseline.
    runs = {name: [] for name, _, _ in configs}
    for _ in range(repeats):
        for name, cfg, _ in configs:
            cmd = [os.path.join(build, "bin", "accel"), "launch", "-q", "-n", "2", "--main_process_port", "0",
                   "--num_cpu_threads_per_process", "1", os.path.join(build, "bench", "bench_shard_step"),
                   model, steps, warmup, cfg]
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if out.returncode != 0:
                sys.exit("%s failed:\n%s" % (" ".join(cmd), out.stdout))
            ranks = []
            for line in out.stdout.splitlines():
                m = re.search(r"shard_step rank (\d+) median_step_ms ([\d.]+) memory (\{.*\})", line)
                if m:
                    ranks.append((float(m.group(2)), json.loads(m.group(3))))
            if len(ranks) != 2:
                sys.exit("expected 2 result lines from %s:\n%s" % (name, out.stdout))
            runs[name].append((max(r[0] for r in ranks),
                               max(r[1]["models"][0]["model_state_bytes"] for r in ranks),
                               max(r[1]["peak_rss_bytes"] for r in ranks),
                               max(r[1]["models"][0]["peak_gathered_bytes"] for r in ranks)))
    med = lambda xs: (sorted(xs)[(len(xs) - 1) // 2] + sorted(xs)[len(xs) // 2]) / 2
    print("%s (2 processes, %s steps after %s warm-up, %d round(s); per rank, the larger of the two)" % (
        model, steps, warmup, repeats))
    print("| strategy | model state MiB | x DDP | peak gathered MiB | peak RSS MiB | x DDP | step ms | x DDP |"
          + (" x DDP per round |" if repeats > 1 else ""))
    print("| --- | --- | --- | --- | --- | --- | --- | --- |" + (" --- |" if repeats > 1 else ""))
    for name, _, base_name in configs:
        mine, base = runs[name], runs[base_name]
        ratios = [m[0] / b[0] for m, b in zip(mine, base)]
        print("| %s | %.1f | %.3f | %.1f | %.0f | %.3f | %.1f | %.2f |" % (
            name, mine[0][1] / 2**20, mine[0][1] / base[0][1], max(m[3] for m in mine) / 2**20,
            med([m[2] for m in mine]) / 2**20, med([m[2] / b[2] for m, b in zip(mine, base)]),
            med([m[0] for m in mine]), med(ratios))
            + (" %s |" % " ".join("%.2f" % r for r in ratios) if repeats > 1 else ""))
    print()
PY
