#!/usr/bin/env bash
# Sharded checkpoints against FULL ones and dd, 2 processes, in one run: median save_state / load_state time
# of bench/shard_ckpt.c with fsdp_plugin FULL_SHARD and state_dict_type SHARDED_STATE_DICT (every rank writes
# its pieces) and FULL_STATE_DICT (gathered, rank 0 writes), with deepspeed_plugin ZeRO-3 (DeepSpeed's layout:
# each rank sent the ranges of its partition, tensor by tensor; every rank writes its partition), and dd writing (conv=fsync) and reading the
# sharded checkpoint's number of bytes; each row's MB/s is over its own bytes. Usage: bash bench/shard_ckpt.sh [BUILD_DIR] [FOLDER] [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
folder=${2:-/tmp}
rounds=${3:-5}
python3 - "$build" "$folder" "$rounds" <<'PY'
import os, re, shutil, statistics, subprocess, sys, tempfile, time
build, folder, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
env = dict(os.environ, OMP_NUM_THREADS="1")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
    env.pop(k, None)
work = tempfile.mkdtemp(prefix="shard_ckpt_", dir=folder)
print("load average before: %.2f" % os.getloadavg()[0])

def folder_bytes(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)

rows = []
fsdp = '{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", "sync_module_states": true, "state_dict_type": "%s"}}'
configs = [("SHARDED_STATE_DICT", fsdp % "SHARDED_STATE_DICT"), ("FULL_STATE_DICT", fsdp % "FULL_STATE_DICT"),
           ("DeepSpeed layout (ZeRO-3)", '{"deepspeed_plugin": {"zero_stage": 3}}')]
for kind, cfg in configs:
    ckpt = os.path.join(work, kind.split()[0])
    cmd = [os.path.join(build, "bin", "accel"), "launch", "-q", "-n", "2", "--main_process_port", "0",
           "--num_cpu_threads_per_process", "1", os.path.join(build, "bench", "bench_shard_ckpt"), ckpt, str(rounds), cfg]
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if out.returncode != 0:
        sys.exit("%s failed:\n%s" % (" ".join(cmd), out.stdout))
    res = [tuple(map(float, m.groups())) for m in re.finditer(r"median_save_ms ([\d.]+) median_load_ms ([\d.]+)", out.stdout)]
    if len(res) != 2:
        sys.exit("expected 2 result lines:\n" + out.stdout)
    rows.append((kind, max(r[0] for r in res), max(r[1] for r in res), folder_bytes(ckpt)))

# dd on the same bytes: one file of the sharded checkpoint's size, written with fsync and read back.
nbytes = rows[0][3]
src, dst = os.path.join(work, "src"), os.path.join(work, "dst")
with open(src, "wb") as f:
    f.write(os.urandom(1 << 20) * (nbytes >> 20) + os.urandom(nbytes & ((1 << 20) - 1)))
def timed(cmd):
    t0 = time.time()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.time() - t0) * 1e3
dd_w = statistics.median(timed(["dd", "if=" + src, "of=" + dst, "bs=1M", "conv=fsync"]) for _ in range(rounds))
dd_r = statistics.median(timed(["dd", "if=" + dst, "of=/dev/null", "bs=1M"]) for _ in range(rounds))
mb = lambda ms: nbytes / 1e6 / (ms / 1e3)
print("%d rounds, 2 processes, checkpoint of %.1f MB (model + AdamW state)" % (rounds, nbytes / 1e6))
print("| | save ms | MB/s | x dd write | load ms | MB/s | x dd read | MB |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for kind, s, l, b in rows:
    rate = lambda ms: b / 1e6 / (ms / 1e3)  # this checkpoint's own bytes
    print("| %s | %.0f | %.0f | %.0f %% | %.0f | %.0f | %.0f %% | %.1f |" % (kind, s, rate(s), 100 * rate(s) / mb(dd_w),
                                                                     l, rate(l), 100 * rate(l) / mb(dd_r), b / 1e6))
print("| dd (bs=1M; write with conv=fsync) | %.0f | %.0f | | %.0f | %.0f | | %.1f |" % (dd_w, mb(dd_w), dd_r, mb(dd_r), nbytes / 1e6))
print("load average after: %.2f" % os.getloadavg()[0])
shutil.rmtree(work, ignore_errors=True)
PY
