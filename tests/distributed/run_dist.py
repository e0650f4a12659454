#!/usr/bin/env python3
"""Drives the multi-process tests: starts the test programs with `accel launch`, with mpirun, or by hand,
and checks what they print or write. Usage: run_dist.py SCENARIO --bin BUILD_DIR [options]."""
import argparse
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import types

from ports import free_port

SKIP = 77


def log(*a):
    print(*a, flush=True)


def env_base():
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def run(cmd, timeout=120, env=None, check=True):
    log("$", " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                       env=env or env_base())
    log(p.stdout.rstrip())
    log("(exit %d after %.1f s)" % (p.returncode, time.time() - t0))
    if check and p.returncode != 0:
        sys.exit("command failed with status %d: %s" % (p.returncode, " ".join(cmd)))
    return p


def launch_cmd(a, n, extra=()):
    return [os.path.join(a.bin, "bin", "accel"), "launch", "-n", str(n), "--main_process_port", "0", *extra]


def mpirun_cmd(n):
    return ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), "-x", "OMP_NUM_THREADS=1"]


def read_result(path, num_floats=None):
    data = open(path, "rb").read()
    return data


def compare_files(ref_path, got_path, tol):
    ref = open(ref_path, "rb").read()
    got = open(got_path, "rb").read()
    if len(ref) != len(got):
        sys.exit("result sizes differ: %d vs %d bytes" % (len(ref), len(got)))
    # floats (parameters) then doubles (norms): both files share the layout; compare as float32 pairs
    # up to the norms, which the caller tells apart by their count.
    return ref, got


def check_close(ref, got, tol, what):
    worst = 0.0
    for i, (x, y) in enumerate(zip(ref, got)):
        d = abs(x - y) / max(1.0, abs(x))
        worst = max(worst, d)
        if d > tol:
            sys.exit("%s[%d]: %r vs %r (relative difference %.3g > %g)" % (what, i, x, y, d, tol))
    log("%s: %d values agree, worst relative difference %.3g (tolerance %g)" % (what, len(ref), worst, tol))


def split_result(path, num_params):
    data = open(path, "rb").read()
    params = struct.unpack("<%df" % num_params, data[: 4 * num_params])
    rest = data[4 * num_params:]
    norms = struct.unpack("<%dd" % (len(rest) // 8), rest)
    return params, norms


def widths_numel(widths):
    w = [int(x) for x in widths.split(",")]
    return sum(w[i] * w[i + 1] + w[i + 1] for i in range(len(w) - 1))


def gpt_numel(vocab=11, positions=8, e=8, layers=2):
    """Parameters of dist_train's gpt spec (the head is tied: no lm_head.weight)."""
    block = 2 * e + (e * 3 * e + 3 * e) + (e * e + e) + 2 * e + (e * 4 * e + 4 * e) + (4 * e * e + e)
    return vocab * e + positions * e + layers * block + 2 * e


def llama_numel(vocab=11, e=8, inner=12, layers=2, heads=2, kv=1):
    """Parameters of dist_train's llama spec (tied head; head_dim e / heads)."""
    d = e // heads
    layer = e * heads * d * 2 + 2 * e * kv * d + 3 * e * inner + 2 * e
    return vocab * e + layers * layer + e


def memory_stats(out):
    """model_state_bytes (and the rest) of every rank's "memory stats: {...}" line."""
    import json
    stats = []
    for line in out.splitlines():
        i = line.find("memory stats: ")
        if i >= 0:
            stats.append(json.loads(line[i + len("memory stats: "):]))
    return stats


def run_machines(a, program, env, cwds=None):
    """`accel launch` once per machine (--num_machines M on this one host, all started together): a multi-node
    job's rendezvous and topology without a second host. Returns the joined output like run()'s result. `cwds`: each
    machine's working folder (a relative path then names a folder of each machine's own, as a node's local disk)."""
    port = free_port()
    procs = []
    for k in range(a.machines):
        cmd = [os.path.join(a.bin, "bin", "accel"), "launch", "-n", str(a.np), "--num_machines", str(a.machines),
               "--machine_rank", str(k), "--main_process_ip", "127.0.0.1", "--main_process_port", str(port)] + program
        log("$", " ".join(cmd))
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                      cwd=cwds[k] if cwds else None))
    outs = []
    for k, proc in enumerate(procs):
        out, _ = proc.communicate(timeout=a.timeout)
        log(out.rstrip())
        outs.append(out)
        if proc.returncode != 0:
            sys.exit("machine %d: accel launch exited with status %d" % (k, proc.returncode))
    return types.SimpleNamespace(stdout="".join(outs), returncode=0)


def run_by_hand(a, cmd, config, env):
    """--np processes started here with no launcher's environment (no RANK, WORLD_SIZE, MASTER_*), each told its
    place by its own config: kwargs_handlers.init_process_group rank, world_size and a tcp:// init_method, as a
    long-running service is told at run time (issue 43.10). Returns rank 0's run."""
    port = free_port()
    launcher_vars = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                     "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
    env = {k: v for k, v in env.items() if k not in launcher_vars}
    procs = []
    for rank in range(a.np):
        c = json.loads(config)
        c.setdefault("kwargs_handlers", {}).setdefault("init_process_group", {}).update(
            rank=rank, world_size=a.np, init_method="tcp://127.0.0.1:%d" % port, timeout=a.timeout)
        procs.append(subprocess.Popen(cmd + [json.dumps(c)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = [p.communicate(timeout=a.timeout)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outs)):
        if p.returncode != 0:
            sys.exit("process %d (placed by init_process_group) exited with %d:\n%s" % (rank, p.returncode, out[-2000:]))
    log("%d processes placed by init_process_group's rank/world_size/init_method, no launcher" % a.np)
    return subprocess.CompletedProcess(cmd, 0, outs[0], "")


def scenario_equivalence(a):
    """P processes with batch B must give the weights of 1 process with batch P*B (or, with --ref-np P,
    of P processes under --ref-config, e.g. DDP against a sharded run)."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
    tmp = tempfile.mkdtemp(prefix="accel_eq_")
    widths = a.widths
    e = env_base()
    e["ACCEL_TEST_WIDTHS"] = widths
    if a.gpt:
        e["ACCEL_TEST_GPT"] = a.gpt
    extra_env = dict(kv.split("=", 1) for kv in (a.env or []))
    e.update(extra_env)
    ref = os.path.join(tmp, "ref.bin")
    got = os.path.join(tmp, "got.bin")
    a.config = a.config.replace("@TMP@", tmp)  # folders the run may write (offload)
    ref_config = a.ref_config or a.config

    def cmd_for(np_, out, batch, config):
        if a.launcher == "by_hand":
            return None  # run_by_hand starts the processes itself
        if a.launcher == "launch":
            return launch_cmd(a, np_) + [prog, out, str(batch), str(a.steps), config]
        if a.launcher == "mpirun":
            xs = []
            for k in ["ACCEL_TEST_WIDTHS"] + (["ACCEL_TEST_GPT"] if a.gpt else []) + list(extra_env):
                xs += ["-x", k]
            return mpirun_cmd(np_) + xs + [prog, out, str(batch), str(a.steps), config]
        sys.exit("unknown launcher " + a.launcher)

    if a.ref_np > 1:
        ref_out = run(cmd_for(a.ref_np, ref, a.batch * a.np // a.ref_np, ref_config), env=e, timeout=a.timeout).stdout
    else:
        ref_out = run([prog, ref, str(a.batch * a.np), str(a.steps), ref_config], env=e).stdout
    if a.machines > 1:
        p = run_machines(a, [prog, got, str(a.batch), str(a.steps), a.config], e)
    elif a.launcher == "by_hand":
        p = run_by_hand(a, [prog, got, str(a.batch), str(a.steps)], a.config, e)
    else:
        p = run(cmd_for(a.np, got, a.batch, a.config), env=e, timeout=a.timeout)
    if a.expect_backend and ('"backend": "%s"' % a.expect_backend) not in p.stdout:
        sys.exit("expected the %s backend in the DDP statistics" % a.expect_backend)
    if a.min_buckets:
        m = re.search(r'"num_buckets": (\d+)', p.stdout)
        if not m or int(m.group(1)) < a.min_buckets:
            sys.exit("expected at least %d DDP buckets" % a.min_buckets)
    if a.expect_syncs:
        m = re.search(r'"syncs": (\d+)', p.stdout)
        if not m or int(m.group(1)) != a.expect_syncs:
            sys.exit("expected %d synchronised backward passes, stats say %s" % (a.expect_syncs, m and m.group(1)))
    n = (llama_numel() if a.gpt == "llama" else gpt_numel()) if a.gpt else widths_numel(widths)
    n = a.num_params or n
    rp, rn = split_result(ref, n)
    gp, gn = split_result(got, n)
    if len(rn) != len(gn):
        sys.exit("%d gradient norms vs %d" % (len(rn), len(gn)))
    check_close(rp, gp, a.tol, "parameters")
    check_close(rn, gn, a.tol, "clip_grad_norm total norms")
    if rp == gp:
        log("(bitwise identical)")
        if a.expect_different:
            sys.exit("bitwise identical to the reference: the 16-bit policy changed nothing")
    if a.expect_peak_gathered:
        for st in memory_stats(p.stdout):
            got_peak = st["models"][0]["peak_gathered_bytes"]
            log("rank %d: peak gathered %d bytes (expected %d)" % (st["rank"], got_peak, a.expect_peak_gathered))
            if got_peak != a.expect_peak_gathered:
                sys.exit("rank %d: peak_gathered_bytes %d, expected %d" % (st["rank"], got_peak, a.expect_peak_gathered))
    if a.expect_offload:
        # Optimizer offload: the same state as the reference, out of memory after the step ("nvme": in the files,
        # at most the bound in memory during it; "cpu": host memory, accounted as offloaded).
        rs, gs = memory_stats(ref_out), memory_stats(p.stdout)
        if not rs or len(gs) != a.np:
            sys.exit("no memory statistics printed")
        for r, g in zip(sorted(rs, key=lambda s: s["rank"]), sorted(gs, key=lambda s: s["rank"])):
            want, m = r["models"][0]["optimizer_state_bytes"], g["models"][0]
            log("rank %d: optimizer state %d bytes in memory, %d offloaded, at most %d in memory at once; without "
                "offload %d" % (g["rank"], m["optimizer_state_bytes"], m["offloaded_bytes"],
                                m["peak_optimizer_state_bytes"], want))
            if m["offloaded_bytes"] != want or want == 0:
                sys.exit("offloaded_bytes %d, expected the reference's optimizer state (%d)" % (m["offloaded_bytes"], want))
            if a.expect_offload == "nvme" and (m["optimizer_state_bytes"] != 0 or not 0 < m["peak_optimizer_state_bytes"] <= want):
                sys.exit("nvme: expected no optimizer state in memory after the step and a peak within (0, %d]" % want)
            if a.max_peak_optimizer_bytes and m["peak_optimizer_state_bytes"] > a.max_peak_optimizer_bytes:
                sys.exit("rank %d: at most %d optimizer state bytes in memory at once, expected at most %d"
                         % (g["rank"], m["peak_optimizer_state_bytes"], a.max_peak_optimizer_bytes))
    if a.expect_param_offload:
        # Parameter offload: "nvme": after the last step no parameter shard is in memory (all in the files), and
        # the most parameter + gradient + gathered bytes at once is below the reference's (one shard in memory
        # during the step instead of all); "cpu": every parameter byte accounted as offloaded.
        rs, gs = memory_stats(ref_out), memory_stats(p.stdout)
        if not rs or len(gs) != a.np:
            sys.exit("no memory statistics printed")
        for r, g in zip(sorted(rs, key=lambda s: s["rank"]), sorted(gs, key=lambda s: s["rank"])):
            want, m = r["models"][0]["parameter_bytes"], g["models"][0]
            peak, ref_peak = m["peak_parameter_gradient_gathered_bytes"], r["models"][0]["peak_parameter_gradient_gathered_bytes"]
            log("rank %d: parameters %d bytes in memory, %d offloaded (without offload %d in memory); peak "
                "parameters+gradients+gathered %d (without %d)" % (g["rank"], m["parameter_bytes"],
                                                                   m["offloaded_parameter_bytes"], want, peak, ref_peak))
            if want == 0 or m["offloaded_parameter_bytes"] != want:
                sys.exit("offloaded_parameter_bytes %d, expected the reference's parameter bytes (%d)"
                         % (m["offloaded_parameter_bytes"], want))
            if a.expect_param_offload == "nvme" and (m["parameter_bytes"] != 0 or not peak < ref_peak):
                sys.exit("nvme: expected no parameter shard in memory after the step and a lower peak")
            if a.expect_param_offload == "cpu" and m["parameter_bytes"] != want:
                sys.exit("cpu: expected the parameters in (host) memory as without offload")
    if a.expect_offload or a.expect_param_offload:
        if os.path.isdir(os.path.join(tmp, "nvme")) and os.listdir(os.path.join(tmp, "nvme")):
            sys.exit("the offload folders were left behind: %s" % os.listdir(os.path.join(tmp, "nvme")))
    if a.memory_ratio:
        rs, gs = memory_stats(ref_out), memory_stats(p.stdout)
        if not rs or not gs:
            sys.exit("no memory statistics printed")
        ref_state = max(s["models"][0]["model_state_bytes"] for s in rs)
        for s in gs:
            m = s["models"][0]
            ratio = m["model_state_bytes"] / ref_state
            log("rank %d %s: model state %d bytes (params %d, grads %d, optimizer %d) = %.4f x reference %d bytes; "
                "peak RSS %d" % (s["rank"], s["strategy"], m["model_state_bytes"], m["parameter_bytes"],
                                 m["gradient_bytes"], m["optimizer_state_bytes"], ratio, ref_state, s["peak_rss_bytes"]))
            if ratio > a.memory_ratio:
                sys.exit("model state per rank is %.4f x the reference, above %.4f" % (ratio, a.memory_ratio))
    if a.param_ratio:
        # Parameter bytes per rank against the reference's: with frozen parameters sharded too, about 1/np of the
        # whole model (a frozen parameter kept whole on every rank would show as the frozen part's whole size).
        rs, gs = memory_stats(ref_out), memory_stats(p.stdout)
        if not rs or len(gs) != a.np:
            sys.exit("no memory statistics printed")
        whole = max(s["models"][0]["parameter_bytes"] for s in rs)
        for s in gs:
            m = s["models"][0]
            log("rank %d: parameters %d bytes = %.4f x the reference's %d" % (s["rank"], m["parameter_bytes"],
                                                                            m["parameter_bytes"] / whole, whole))
            if whole == 0 or m["parameter_bytes"] > a.param_ratio * whole:
                sys.exit("rank %d holds %d parameter bytes, above %.4f x the reference's %d"
                         % (s["rank"], m["parameter_bytes"], a.param_ratio, whole))
    shutil.rmtree(tmp, ignore_errors=True)


# (P, n, batch, drop_last, split, even) -> per-rank batches, from data-and-collectives.md §3.3
R = lambda a, b: list(range(a, b))
SHARDING_CASES = [
    (2, 24, 3, False, False, True, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18), R(21, 24)]]),
    (2, 24, 3, True, False, True, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18), R(21, 24)]]),
    (2, 21, 3, False, False, True, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18), [0, 1, 2]]]),
    (2, 21, 3, True, False, True, [[R(0, 3), R(6, 9), R(12, 15)], [R(3, 6), R(9, 12), R(15, 18)]]),
    (2, 22, 3, False, False, True, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18), [21, 0, 1]]]),
    (2, 20, 3, False, False, True, [[R(0, 3), R(6, 9), R(12, 15), [18, 19, 0]], [R(3, 6), R(9, 12), R(15, 18), [1, 2, 3]]]),
    (2, 20, 3, True, False, True, [[R(0, 3), R(6, 9), R(12, 15)], [R(3, 6), R(9, 12), R(15, 18)]]),
    (2, 2, 3, False, False, True, [[[0, 1, 0]], [[1, 0, 1]]]),
    (2, 2, 3, True, False, True, [[], []]),
    (2, 21, 3, False, False, False, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18)]]),
    (2, 22, 3, False, False, False, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18), [21]]]),
    (2, 20, 3, False, False, False, [[R(0, 3), R(6, 9), R(12, 15), [18, 19]], [R(3, 6), R(9, 12), R(15, 18)]]),
    (2, 2, 3, False, False, False, [[[0, 1]], []]),
    (2, 24, 4, False, True, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), R(20, 22)],
                                   [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), R(22, 24)]]),
    (2, 24, 4, True, True, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), R(20, 22)],
                                  [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), R(22, 24)]]),
    (2, 22, 4, False, True, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), R(20, 22)],
                                   [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), [0, 1]]]),
    (2, 22, 4, True, True, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18)],
                                  [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20)]]),
    (2, 21, 4, False, True, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), [20, 0]],
                                   [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), [1, 2]]]),
    (2, 2, 4, False, True, True, [[[0, 1]], [[0, 1]]]),
    (2, 22, 4, False, True, False, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), R(20, 22)],
                                    [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20)]]),
    (2, 21, 4, False, True, False, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), [20]],
                                    [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20)]]),
    (2, 2, 4, False, True, False, [[[0, 1]], []]),
    # three processes, an uneven split: 7 batches of 3 over 3 ranks, padded from the start
    (3, 20, 3, False, False, True, [[R(0, 3), R(9, 12), [18, 19, 0]], [R(3, 6), R(12, 15), [1, 2, 3]],
                                    [R(6, 9), R(15, 18), [4, 5, 6]]]),
]


def parse_ranks(out, p, k):
    per = [[] for _ in range(p)]
    gathered = None
    gathered_indices = None
    for line in out.splitlines():
        m = re.match(r"\[rank(\d+)\]: case %d batch \[([\d,]*)\]" % k, line)
        if m:
            per[int(m.group(1))].append([int(x) for x in m.group(2).split(",") if x != ""])
        m = re.match(r"\[rank0\]: case %d gathered (\d+)" % k, line)
        if m:
            gathered = int(m.group(1))
        m = re.match(r"\[rank0\]: case %d gathered_indices \[([\d,]*)\]" % k, line)
        if m:
            gathered_indices = [int(x) for x in m.group(1).split(",") if x != ""]
    return per, gathered, gathered_indices


def scenario_sharding(a):
    """The tables of data-and-collectives.md §3.3: every case of one process count in one launch."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_sharding")
    failures = 0
    for p in sorted(set(c[0] for c in SHARDING_CASES)):
        cases = [c for c in SHARDING_CASES if c[0] == p]
        args = ["%d,%d,%d,%d,%d" % (n, bs, drop, split, even) for (_, n, bs, drop, split, even, _) in cases]
        out = run(launch_cmd(a, p) + [prog] + args).stdout
        for k, (_, n, bs, drop, split, even, expected) in enumerate(cases):
            label = "P=%d range(%d) batch %d drop_last=%s split=%s even=%s" % (p, n, bs, drop, split, even)
            per, gathered, gathered_indices = parse_ranks(out, p, k)
            if per != expected:
                log("FAIL %s:\n  expected %s\n  got      %s" % (label, expected, per))
                failures += 1
                continue
            if even and not drop and (gathered != n or gathered_indices != list(range(n))):
                # gather_for_metrics drops the repeated samples: exactly the data set, in order
                log("FAIL %s: gather_for_metrics gave %s items: %s" % (label, gathered, gathered_indices))
                failures += 1
                continue
            log("ok   %s (gathered %s)" % (label, gathered))
    if failures:
        sys.exit("%d sharding cases failed" % failures)


# dispatch_batches (data-and-collectives.md §6), worked out by hand: per step rank 0 reads P inner batches
# (one with split_batches) and rank r keeps [r*b, (r+1)*b), b = size // P; a last step whose size is not a
# multiple of P gets the first P samples of the first step appended and b + 1; drop_last drops a short round.
# (P, n, batch, drop_last, split) -> per-rank batches
DISPATCH_CASES = [
    (2, 24, 3, False, False, [[R(0, 3), R(6, 9), R(12, 15), R(18, 21)], [R(3, 6), R(9, 12), R(15, 18), R(21, 24)]]),
    (2, 21, 3, False, False, [[R(0, 3), R(6, 9), R(12, 15), [18, 19]], [R(3, 6), R(9, 12), R(15, 18), [20, 0]]]),
    (2, 21, 3, True, False, [[R(0, 3), R(6, 9), R(12, 15)], [R(3, 6), R(9, 12), R(15, 18)]]),
    (2, 22, 3, False, False, [[R(0, 3), R(6, 9), R(12, 15), [18, 19]], [R(3, 6), R(9, 12), R(15, 18), [20, 21]]]),
    (2, 20, 3, False, False, [[R(0, 3), R(6, 9), R(12, 15), [18]], [R(3, 6), R(9, 12), R(15, 18), [19]]]),
    (2, 5, 3, False, False, [[[0, 1, 2]], [[3, 4, 0]]]),
    (2, 2, 3, False, False, [[[0]], [[1]]]),
    (2, 2, 3, True, False, [[], []]),
    (2, 24, 4, False, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), R(20, 22)],
                             [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), R(22, 24)]]),
    (2, 22, 4, False, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), [20]],
                             [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), [21]]]),
    (2, 22, 4, True, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18)],
                            [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20)]]),
    (2, 21, 4, False, True, [[R(0, 2), R(4, 6), R(8, 10), R(12, 14), R(16, 18), [20]],
                             [R(2, 4), R(6, 8), R(10, 12), R(14, 16), R(18, 20), [0]]]),
    (2, 3, 4, False, True, [[[0, 1]], [[2, 0]]]),
    (3, 20, 3, False, False, [[R(0, 3), R(9, 12), [18]], [R(3, 6), R(12, 15), [19]], [R(6, 9), R(15, 18), [0]]]),
    (3, 20, 3, True, False, [[R(0, 3), R(9, 12)], [R(3, 6), R(12, 15)], [R(6, 9), R(15, 18)]]),
    (3, 25, 3, False, False, [[R(0, 3), R(9, 12), [18, 19, 20]], [R(3, 6), R(12, 15), [21, 22, 23]],
                              [R(6, 9), R(15, 18), [24, 0, 1]]]),
    (3, 22, 3, False, False, [[R(0, 3), R(9, 12), [18, 19]], [R(3, 6), R(12, 15), [20, 21]],
                              [R(6, 9), R(15, 18), [0, 1]]]),
    (3, 10, 6, False, True, [[[0, 1], [6, 7]], [[2, 3], [8, 9]], [[4, 5], [0, 1]]]),
    (3, 7, 3, False, True, [[[0], [3], [6]], [[1], [4], [0]], [[2], [5], [1]]]),
    (3, 7, 3, True, True, [[[0], [3]], [[1], [4]], [[2], [5]]]),
]


def scenario_dispatch(a):
    """dispatch_batches: which rank gets which samples, and gather_for_metrics gives back exactly the data."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_sharding")
    failures = 0
    for p in sorted(set(c[0] for c in DISPATCH_CASES)):
        cases = [c for c in DISPATCH_CASES if c[0] == p]
        # even_batches true: it must not matter when dispatching
        args = ["%d,%d,%d,%d,1,1" % (n, bs, drop, split) for (_, n, bs, drop, split, _) in cases]
        out = run(launch_cmd(a, p) + [prog] + args).stdout
        for k, (_, n, bs, drop, split, expected) in enumerate(cases):
            label = "P=%d range(%d) batch %d drop_last=%s split=%s dispatch" % (p, n, bs, drop, split)
            per, gathered, gathered_indices = parse_ranks(out, p, k)
            if per != expected:
                log("FAIL %s:\n  expected %s\n  got      %s" % (label, expected, per))
                failures += 1
                continue
            # every sample once, in order: the padding is dropped (drop_last: what was dispatched)
            want = n if not drop else sum(len(b) for r in expected for b in r)
            if gathered != want or gathered_indices != list(range(want)):
                log("FAIL %s: gather_for_metrics gave %s items: %s" % (label, gathered, gathered_indices))
                failures += 1
                continue
            log("ok   %s (gathered %s)" % (label, gathered))
    if failures:
        sys.exit("%d dispatch cases failed" % failures)


def scenario_collectives(a):
    prog = os.path.join(a.bin, "tests", "distributed", "dist_collectives")
    marker = tempfile.mktemp(prefix="accel_marker_")
    if a.launcher == "launch":
        run(launch_cmd(a, a.np) + [prog, "gloo", marker])
        # a file:// rendezvous instead of MASTER_ADDR/MASTER_PORT
        store = tempfile.mktemp(prefix="accel_store_")
        run(launch_cmd(a, a.np) + [prog, "gloo", marker,
                                   '{"kwargs_handlers": {"init_process_group": {"init_method": "file://%s"}}}' % store])
    else:
        run(mpirun_cmd(a.np) + [prog, "mpi", marker])
        # gloo under mpirun when asked for, through MASTER_ADDR/MASTER_PORT
        run_on_free_port(lambda port: mpirun_cmd(a.np) + ["-x", "MASTER_ADDR=127.0.0.1", "-x", "MASTER_PORT=%d" % port,
                                                          prog, "gloo", marker,
                                                          '{"kwargs_handlers": {"init_process_group": {"backend": "gloo"}}}'])
    if os.path.exists(marker):
        os.unlink(marker)


def scenario_objects(a):
    """dist_objects on a.np processes: gloo under accel launch, mpi under mpirun; every process reports."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_objects")
    if a.launcher == "launch":
        p = run(launch_cmd(a, a.np) + [prog, "gloo"])
    else:
        p = run(mpirun_cmd(a.np) + [prog, "mpi"])
    ok = re.findall(r"objects: ok rank (\d+) of %d" % a.np, p.stdout)
    if sorted(int(r) for r in ok) != list(range(a.np)):
        sys.exit("expected 'objects: ok' from ranks 0..%d, got %s" % (a.np - 1, ok))


def scenario_join(a):
    """dist_join on a.np gloo processes: the prepared loader with even_batches overridden, each process's own
    loader (2 + 3r batches) with and without accumulation, and the refused calls; every process reports."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_join")
    uneven = '{"dataloader_config": {"even_batches": false}'
    for mode, config in (("shard", "{}"), ("own", uneven + "}"),
                         ("own", uneven + ', "gradient_accumulation_steps": 2}'), ("misuse", "{}")):
        p = run(launch_cmd(a, a.np) + [prog, mode, config], timeout=a.timeout)
        ok = re.findall(r"join: ok rank (\d+) of %d" % a.np, p.stdout)
        if sorted(int(r) for r in ok) != list(range(a.np)):
            sys.exit("%s: expected 'join: ok' from ranks 0..%d, got %s" % (mode, a.np - 1, ok))


def read_folder_tensors(d):
    """Every tensor of a save_pretrained folder (one file or the shards its index lists): name -> (dtype, shape,
    raw bytes)."""
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for f in files:
        raw = open(os.path.join(d, f), "rb").read()
        n = struct.unpack("<Q", raw[:8])[0]
        head = json.loads(raw[8:8 + n])
        head.pop("__metadata__", None)
        for k, h in head.items():
            b, e = h["data_offsets"]
            out[k] = (h["dtype"], h["shape"], raw[8 + n + b:8 + n + e])
    return out


def run_state_dict_program(a, mode):
    """dist_state_dict MODE on a.np gloo processes under accel launch with a.config; every process reports. Returns
    the folder the processes wrote into (removed by the caller)."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_state_dict")
    tmp = tempfile.mkdtemp(prefix="accel_state_dict_")
    os.makedirs(os.path.join(tmp, "get_state_dict"))
    p = run(launch_cmd(a, a.np) + [prog, mode, a.config, tmp], timeout=a.timeout)
    ok = re.findall(r"%s: ok rank (\d+) of %d" % (mode, a.np), p.stdout)
    if sorted(int(r) for r in ok) != list(range(a.np)):
        sys.exit("%s: expected '%s: ok' from ranks 0..%d, got %s" % (mode, mode, a.np - 1, ok))
    return tmp


def scenario_state_dict(a):
    """get_state_dict on a.np processes under a.config (dist_state_dict.c checks each process's dict); then the
    trained state dict process 0 wrote equals save_model's folder bit for bit: the same keys, dtypes, shapes and
    bytes."""
    tmp = run_state_dict_program(a, "state_dict")
    try:
        got = read_folder_tensors(os.path.join(tmp, "get_state_dict"))
        want = read_folder_tensors(os.path.join(tmp, "save_model"))
        if sorted(got) != sorted(want):
            sys.exit("get_state_dict keys %s != save_model keys %s" % (sorted(got), sorted(want)))
        for k in want:
            if got[k] != want[k]:
                sys.exit("get_state_dict's %s differs from save_model's (dtype, shape or bytes)" % k)
        log("get_state_dict == save_model: %d tensors, bit for bit" % len(want))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def scenario_state_hooks(a):
    """save/load pre-hooks and accel_accelerator_save on a.np processes (dist_state_dict.c's hooks mode)."""
    shutil.rmtree(run_state_dict_program(a, "hooks"), ignore_errors=True)


def scenario_pretrained(a):
    """dist_pretrained: a sharded folder loads through from_pretrained on a.np processes under DDP, FULL_SHARD, ZeRO-2,
    ZeRO-3, zero3_init_flag and FSDP's cpu_ram_efficient_loading (each process copying only its slices), and save_pretrained from every process writes
    the same tensors back, bit for bit (gathered on the main process)."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_pretrained")
    tmp = tempfile.mkdtemp(prefix="accel_pretrained_")
    src = os.path.join(tmp, "src")
    run([prog, "write", src])
    want = read_folder_tensors(src)
    if not os.path.exists(os.path.join(src, "model.safetensors.index.json")):
        sys.exit("the source folder is not sharded")
    cases = [("ddp", "{}"),
             ("full_shard", '{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD"}}'),
             ("zero2", '{"deepspeed_plugin": {"zero_stage": 2}}'),
             ("zero3", '{"deepspeed_plugin": {"zero_stage": 3}}'),
             ("zero3_init", '{"deepspeed_plugin": {"zero_stage": 3, "zero3_init_flag": true}}'),
             ("full_shard_cpu_ram", '{"fsdp_plugin": {"sharding_strategy": "FULL_SHARD", '
                                    '"cpu_ram_efficient_loading": true}}')]
    # Frozen projections and embeddings (the norms train): sharded as the trainable parameters are, and written back
    # whole by save_pretrained.
    frozen = '{"strict": true, "frozen": ["model.layers.*_proj.weight", "model.embed_tokens.weight"]}'
    cases_bf16 = [(n, c) for n, c in cases if n in ("full_shard", "zero3_init", "full_shard_cpu_ram")]
    cases = [(n, c, None) for n, c in cases] + [(n + "_frozen", c, frozen) for n, c in cases if n != "ddp"]
    for name, config, options in cases:
        out = os.path.join(tmp, name)
        p = run(launch_cmd(a, a.np) + [prog, "load", src, out, config] + ([options] if options else []))
        ok = re.findall(r"pretrained: ok rank (\d+)", p.stdout)
        if sorted(int(r) for r in ok) != list(range(a.np)):
            sys.exit("%s: expected 'pretrained: ok' from ranks 0..%d, got %s" % (name, a.np - 1, ok))
        got = read_folder_tensors(out)
        if got != want:
            diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            sys.exit("%s: save_pretrained's folder differs from the source in %s" % (name, diff))
        log("%s: %d tensors from %d shards loaded on %d processes and saved back bit for bit" %
            (name, len(want), len([f for f in os.listdir(src) if f.endswith(".safetensors")]), a.np))
    # bfloat16 weights stay bfloat16 when loaded partitioned (zero3_init_flag, cpu_ram_efficient_loading), as whole: a LoRA
    # fine-tune (float32 adapters on q/v, the bf16 base frozen) is prepared and save_pretrained writes the base back
    # bit for bit in bfloat16 (the adapters beside it).
    src16 = os.path.join(tmp, "src16")
    run([prog, "write16", src, src16])
    want16 = read_folder_tensors(src16)
    if not want16 or any(t[0] != "BF16" for t in want16.values()):
        sys.exit("the bfloat16 source folder holds other dtypes: %s" % sorted({t[0] for t in want16.values()}))
    lora = '{"strict": true, "lora": {"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"]}}'
    for name, config in cases_bf16:
        out = os.path.join(tmp, name + "_bf16")
        run(launch_cmd(a, a.np) + [prog, "load", src16, out, config, lora])
        got = read_folder_tensors(out)
        diff = sorted(k for k in want16 if got.get(k) != want16[k])
        if diff:
            sys.exit("%s bf16: save_pretrained's base tensors differ from the bfloat16 source in %s (dtypes %s)"
                     % (name, diff, sorted({got[k][0] for k in diff if k in got})))
        log("%s: a bfloat16 folder stays bfloat16 and is saved back bit for bit" % name)
    shutil.rmtree(tmp, ignore_errors=True)


def run_on_free_port(make_cmd, attempts=3):
    """Runs make_cmd(port) on a port free when chosen; another test running beside this one may take it before
    rank 0 binds it ("Address already in use"), so that failure alone is retried with a new port."""
    for attempt in range(attempts):
        p = run(make_cmd(free_port()), check=False)
        if p.returncode == 0:
            return p
        if "Address already in use" not in p.stdout or attempt == attempts - 1:
            sys.exit("command failed with status %d" % p.returncode)
        log("the port was taken before rank 0 bound it: again with another")




def scenario_kill(a):
    prog = os.path.join(a.bin, "tests", "distributed", "dist_kill")
    timeout = 10
    # 1. Started by hand (no launcher to clean up): the survivor must fail by itself, naming the rank.
    for victim in (1, 0):
        port = free_port()
        procs = []
        t0 = time.time()
        for r in range(2):
            e = env_base()
            e.update(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(port))
            procs.append(subprocess.Popen([prog, str(victim), str(timeout)], stdout=subprocess.PIPE,
                                          stderr=subprocess.STDOUT, text=True, env=e))
        survivor = procs[1 - victim]
        try:
            out, _ = survivor.communicate(timeout=timeout + 30)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            sys.exit("the survivor hung after rank %d died" % victim)
        procs[victim].wait(timeout=30)
        elapsed = time.time() - t0
        log(out.rstrip())
        log("survivor exit %d after %.1f s" % (survivor.returncode, elapsed))
        if survivor.returncode != 3:
            sys.exit("the survivor did not fail as expected when rank %d died" % victim)
        if ("rank %d" % victim) not in out:
            sys.exit("the error does not name rank %d" % victim)
        if elapsed > timeout + 15:
            sys.exit("the failure took %.1f s, above the %d s timeout" % (elapsed, timeout))
    # 2. Under accel launch: the launcher stops the others and exits with the victim's status.
    t0 = time.time()
    p = run(launch_cmd(a, 2) + [prog, "1", str(timeout)], check=False, timeout=timeout + 60)
    if p.returncode != 128 + signal.SIGKILL or "rank 1" not in p.stdout or "signal 9" not in p.stdout:
        sys.exit("accel launch did not report rank 1's death with its status (exit %d)" % p.returncode)
    if time.time() - t0 > timeout + 20:
        sys.exit("accel launch took too long to stop")
    # 3. Under mpirun: mpirun ends the job and says which rank died.
    if shutil.which("mpirun"):
        t0 = time.time()
        p = run(mpirun_cmd(2) + [prog, "1", str(timeout)], check=False, timeout=timeout + 60)
        if p.returncode == 0:
            sys.exit("mpirun exited 0 although rank 1 died")
        if time.time() - t0 > timeout + 20:
            sys.exit("mpirun took too long to stop")


def scenario_netns(a):
    """Two network namespaces joined by a veth pair act as two machines."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        log("SKIP: needs root and iproute2 (ip) to create network namespaces")
        return SKIP
    tag = "acc%d" % os.getpid()
    ns = [tag + "a", tag + "b"]
    created = []

    def sh(*cmd):
        return subprocess.run(list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    try:
        for n in ns:
            r = sh("ip", "netns", "add", n)
            if r.returncode != 0:
                log("SKIP: this machine does not allow network namespaces (ip netns add: %s)" % r.stdout.strip())
                return SKIP
            created.append(n)
        steps = [
            ("ip", "link", "add", tag + "0", "type", "veth", "peer", "name", tag + "1"),
            ("ip", "link", "set", tag + "0", "netns", ns[0]),
            ("ip", "link", "set", tag + "1", "netns", ns[1]),
            ("ip", "-n", ns[0], "addr", "add", "10.231.0.1/24", "dev", tag + "0"),
            ("ip", "-n", ns[1], "addr", "add", "10.231.0.2/24", "dev", tag + "1"),
            ("ip", "-n", ns[0], "link", "set", tag + "0", "up"),
            ("ip", "-n", ns[1], "link", "set", tag + "1", "up"),
            ("ip", "-n", ns[0], "link", "set", "lo", "up"),
            ("ip", "-n", ns[1], "link", "set", "lo", "up"),
        ]
        for s in steps:
            r = sh(*s)
            if r.returncode != 0:
                log("SKIP: cannot set up the veth pair (%s: %s)" % (" ".join(s), r.stdout.strip()))
                return SKIP
        prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
        tmp = tempfile.mkdtemp(prefix="accel_netns_")
        ref, got = os.path.join(tmp, "ref.bin"), os.path.join(tmp, "got.bin")
        run([prog, ref, "12", "6", "{}"])
        accel = os.path.join(a.bin, "bin", "accel")
        procs = []
        for m in range(2):
            cmd = ["ip", "netns", "exec", ns[m], accel, "launch", "--num_machines", "2", "--machine_rank", str(m),
                   "--main_process_ip", "10.231.0.1", "--main_process_port", "29611", "-n", "2",
                   prog, got, "6", "6", "{}"]
            log("$", " ".join(cmd))
            procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=env_base()))
        for m, p in enumerate(procs):
            out, _ = p.communicate(timeout=120)
            log("machine %d:\n%s" % (m, out.rstrip()))
            if p.returncode != 0:
                sys.exit("machine %d failed with status %d" % (m, p.returncode))
        n = widths_numel("8,32,32,4")
        rp, rn = split_result(ref, n)
        gp, gn = split_result(got, n)
        check_close(rp, gp, 1e-5, "parameters (two machines)")
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        for n in created:
            sh("ip", "netns", "del", n)
    return 0


def read_safetensors_f32(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    head.pop("__metadata__", None)
    out = {}
    for k, h in head.items():
        if h["dtype"] != "F32":
            sys.exit("%s: %s is %s, expected F32" % (path, k, h["dtype"]))
        b, e = h["data_offsets"]
        out[k] = struct.unpack("<%df" % ((e - b) // 4), raw[8 + n + b:8 + n + e])
    return out


def expect_damaged_named(a, ckpt, tmp, env, config, victims):
    """load_state (one process) of a copy of `ckpt` with each (file, "missing" | "truncated") of `victims`
    damaged: ACCEL_ERR_DATA_LOSS naming the file, and nothing loaded."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
    for victim, how in victims:
        bad = os.path.join(tmp, "ckpt_bad")
        shutil.rmtree(bad, ignore_errors=True)
        shutil.copytree(ckpt, bad)
        path = os.path.join(bad, victim)
        if how == "missing":
            os.remove(path)
        else:
            os.truncate(path, os.path.getsize(path) // 2)
        p = run(launch_cmd(a, 1) + [prog, os.path.join(tmp, "bad.bin"), str(a.batch * a.np), "1", config],
                env=dict(env, ACCEL_TEST_LOAD=bad), check=False, timeout=a.timeout)
        if p.returncode == 0 or "DATA_LOSS" not in p.stdout or victim.split("/")[-1] not in p.stdout:
            sys.exit("load_state of a checkpoint whose %s is %s: expected DATA_LOSS naming the file:\n%s"
                     % (victim, how, p.stdout[-2000:]))


def expect_refused_on_every_rank(a, ckpt, tmp, env, config):
    """load_state on every process of a copy of `ckpt` whose random_states_1.pkl (read by process 1 alone) is
    truncated: every process refuses it with the same status, naming process 1 and the file (issue 42.2: process
    0 used to apply the checkpoint and return ACCEL_OK), within the timeout."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
    bad = os.path.join(tmp, "ckpt_bad_rank1")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(ckpt, bad)
    victim = os.path.join(bad, "random_states_1.pkl")
    os.truncate(victim, os.path.getsize(victim) // 2)
    p = run(launch_cmd(a, a.np) + [prog, os.path.join(tmp, "bad.bin"), str(a.batch), "1", config],
            env=dict(env, ACCEL_TEST_LOAD=bad, ACCEL_TEST_LOAD_MAY_FAIL="1"), check=False, timeout=a.timeout)
    for rank in range(a.np):
        lines = [l for l in p.stdout.splitlines() if l.startswith("[rank%d]: load_state refused:" % rank)]
        if not lines or "ACCEL_ERR_DATA_LOSS" not in lines[0] or "process 1" not in lines[0] \
                or "random_states_1.pkl" not in lines[0]:
            sys.exit("rank %d did not refuse the checkpoint with DATA_LOSS naming process 1 and random_states_1.pkl:\n%s"
                     % (rank, p.stdout[-3000:]))
    shutil.rmtree(bad, ignore_errors=True)


def check_deepspeed_checkpoint(a, ckpt, weights_at_save, tmp, env):
    """DeepSpeed's layout under deepspeed_plugin (checkpoint-format.md 2.2): the files each rank writes, `latest`,
    merge-weights equal to the weights the saving run had (bit for bit), DeepSpeed's zero_to_fp32 protocol
    (tests/distributed/ds_zero_to_fp32.py, Python's torch) giving the same, and a damaged folder named."""
    stage, nproc = a.expect_deepspeed, a.np
    folder = os.path.join(ckpt, "pytorch_model")
    got = sorted(os.listdir(folder))
    want = sorted(["zero_pp_rank_%d_mp_rank_00_optim_states.pt" % r for r in range(nproc)] +
                  (["zero_pp_rank_%d_mp_rank_00_model_states.pt" % r for r in range(nproc)] if stage == 3
                   else ["mp_rank_00_model_states.pt"]) + ["accel_checksums.json"])  # accel's record of them
    if got != want:
        sys.exit("pytorch_model/ holds %s, expected %s" % (got, want))
    if open(os.path.join(ckpt, "latest")).read() != "pytorch_model":
        sys.exit("latest does not name pytorch_model")
    if not os.path.isfile(os.path.join(ckpt, "zero_to_fp32.py")):
        sys.exit("zero_to_fp32.py is missing beside the DeepSpeed layout")
    for f in ("model.safetensors", "pytorch_model.bin", "optimizer.bin", "pytorch_model_fsdp_0"):
        if os.path.exists(os.path.join(ckpt, f)):
            sys.exit("a DeepSpeed save also wrote %s" % f)
    log("DeepSpeed layout: latest + pytorch_model/%s" % got)
    params, _ = split_result(weights_at_save, widths_numel(a.widths))
    merged = os.path.join(tmp, "ds_merged")
    run([os.path.join(a.bin, "bin", "accel"), "merge-weights", ckpt, merged])
    tensors = read_safetensors_f32(os.path.join(merged, "model.safetensors"))
    # The MLP's parameters in model order: layer by layer, weight then bias.
    order = sorted(tensors, key=lambda k: (int(k.split(".")[-2]) if k.split(".")[-2].isdigit() else 0,
                                           0 if k.endswith("weight") else 1))
    flat = [x for k in order for x in tensors[k]]
    if tuple(flat) != tuple(params):
        check_close(params, flat, 0.0, "merge-weights of the DeepSpeed checkpoint vs the weights at the save")
    log("merge-weights of the DeepSpeed checkpoint equals the saving run's weights bit for bit (%d tensors)" % len(order))
    py = shutil.which("python3", path="/usr/bin")
    if py and subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
        ref = os.path.join(tmp, "ds_params.f32")
        with open(ref, "wb") as f:
            f.write(struct.pack("<%df" % len(params), *params))
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ds_zero_to_fp32.py")
        p = run([py, script, ckpt, ref, str(stage), str(nproc)])
        log("zero_to_fp32 protocol (Python's torch): %s" % p.stdout.strip().splitlines()[-1])
        # The zero_to_fp32.py accel leaves in the checkpoint: the same tensors as merge-weights, bit for bit.
        out = os.path.join(tmp, "ds_fp32.bin")
        p = run([py, os.path.join(ckpt, "zero_to_fp32.py"), ckpt, out])
        compare = ("import struct, sys, torch\n"
                   "sd = torch.load(sys.argv[1]); want = eval(open(sys.argv[2]).read())\n"
                   "assert sorted(sd) == sorted(want), (sorted(sd), sorted(want))\n"
                   "for k, v in want.items():\n"
                   "    got = sd[k].reshape(-1).tolist()\n"
                   "    assert [struct.pack('<f', x) for x in got] == [struct.pack('<f', x) for x in v], k\n"
                   "print(len(sd))\n")
        listing = os.path.join(tmp, "ds_merged.txt")
        with open(listing, "w") as f:
            f.write(repr({k: list(v) for k, v in tensors.items()}))
        run([py, "-c", compare, out, listing])
        log("the checkpoint's zero_to_fp32.py (%s) gives merge-weights' tensors bit for bit" % p.stdout.strip())
    else:
        log("SKIP the zero_to_fp32 check: /usr/bin/python3 has no torch")
    if a.launcher == "launch":
        victims = [("pytorch_model/zero_pp_rank_1_mp_rank_00_optim_states.pt", "missing"),
                   ("pytorch_model/zero_pp_rank_0_mp_rank_00_optim_states.pt", "truncated")]
        if stage == 3:  # every rank's model states file counts (issue 42.3: rank 1's was never read)
            victims += [("pytorch_model/zero_pp_rank_1_mp_rank_00_model_states.pt", "missing"),
                        ("pytorch_model/zero_pp_rank_1_mp_rank_00_model_states.pt", "truncated")]
        expect_damaged_named(a, ckpt, tmp, env, a.config, victims)
        log("missing and truncated optimizer%s states files are DATA_LOSS naming the file"
            % (" and model" if stage == 3 else ""))


def scenario_resume(a):
    """2N optimizer steps in one run equal N steps + save_state + new processes + load_state + N steps, bit for
    bit (checkpoint-format.md; issue: exact resume with several processes). With --resume-config the second half
    runs with another config (a sharded checkpoint resumed without sharding, or the reverse): equal within --tol."""
    prog = os.path.join(a.bin, "tests", "distributed", "dist_train")
    tmp = tempfile.mkdtemp(prefix="accel_resume_")
    e = env_base()
    e["ACCEL_TEST_WIDTHS"] = a.widths
    extra = dict(kv.split("=", 1) for kv in (a.env or []))
    e.update(extra)
    full, resumed, ckpt = (os.path.join(tmp, x) for x in ("full.bin", "resumed.bin", "ckpt"))
    a.config = a.config.replace("@TMP@", tmp)  # folders the run may write (offload)

    def start(out, steps, extra_env, config, np_=a.np, batch=a.batch):
        env = dict(e, **extra_env)
        if a.machines > 1 and np_ == a.np:  # the saving runs: one accel launch per "machine" on this host
            run_machines(a, [prog, out, str(batch), str(steps), config], env)
            return
        if a.launcher == "launch":
            cmd = launch_cmd(a, np_) + [prog, out, str(batch), str(steps), config]
        else:
            exports = sum((["-x", k] for k in ["ACCEL_TEST_WIDTHS", *extra, *extra_env]), [])
            cmd = mpirun_cmd(np_) + exports + [prog, out, str(batch), str(steps), config]
        run(cmd, env=env, timeout=a.timeout)

    start(full, 2 * a.steps, {}, a.config)
    save_env = {"ACCEL_TEST_SAVE_AT": str(a.steps), "ACCEL_TEST_SAVE_DIR": ckpt}
    if a.async_save:  # the saving run trains on to 2N steps while its files are written
        save_env["ACCEL_TEST_SAVE_ASYNC"] = "1"
    start(os.path.join(tmp, "first.bin"), 2 * a.steps, save_env, a.config)
    if a.reload_in_process:
        # Saved at N, on for 2 steps (the optimizer state changes in place), the checkpoint loaded back into
        # the same objects, on to 2N: bit for bit the uninterrupted run (the load reads into the state the
        # optimizer already has).
        reload = os.path.join(tmp, "reload.bin")
        start(reload, 2 * a.steps, dict(save_env, ACCEL_TEST_SAVE_DIR=os.path.join(tmp, "ckpt_reload"),
                                        ACCEL_TEST_RELOAD_AFTER="2"), a.config)
        n = widths_numel(a.widths)
        (fp, fn_), (rp, rn) = split_result(full, n), split_result(reload, n)
        if fp != rp:
            check_close(fp, rp, 0.0, "parameters after loading back in the same process")
        if list(fn_) != list(rn):
            sys.exit("gradient norms after loading back in the same process differ: %s vs %s" % (fn_, rn))
        log("loaded back in the same process: equal to the uninterrupted run bit for bit")
    files = sorted(os.listdir(ckpt))
    log("checkpoint files: %s" % files)
    for r in range(a.np):
        if "random_states_%d.pkl" % r not in files:
            sys.exit("random_states_%d.pkl is missing: every rank writes its own RNG file" % r)
    if a.expect_sharded:
        # SHARDED_STATE_DICT: Accelerate's folder names, a piece file from every rank, nothing gathered.
        for folder in ("pytorch_model_fsdp_0", "optimizer_0"):
            got = sorted(os.listdir(os.path.join(ckpt, folder))) if folder in files else []
            want = sorted(["metadata.json"] + ["rank%d.safetensors" % r for r in range(a.np // a.machines)] +
                          (["state.bin"] if folder == "optimizer_0" else []))
            if got != want:
                sys.exit("%s/ holds %s, expected %s" % (folder, got, want))
        for f in ("model.safetensors", "pytorch_model.bin", "optimizer.bin"):
            if f in files:
                sys.exit("a sharded save also wrote the gathered %s" % f)
    if a.expect_deepspeed:
        check_deepspeed_checkpoint(a, ckpt, os.path.join(tmp, "first.bin"), tmp, e)
    if a.merge_full_config:
        # accel merge-weights of the sharded checkpoint == the FULL save of the same state, byte for byte.
        full_ckpt = os.path.join(tmp, "ckpt_full")
        start(os.path.join(tmp, "first_full.bin"), 2 * a.steps,
              {"ACCEL_TEST_SAVE_AT": str(a.steps), "ACCEL_TEST_SAVE_DIR": full_ckpt}, a.merge_full_config)
        merged = os.path.join(tmp, "merged")
        run([os.path.join(a.bin, "bin", "accel"), "merge-weights", ckpt, merged])
        want = open(os.path.join(full_ckpt, "model.safetensors"), "rb").read()
        got = open(os.path.join(merged, "model.safetensors"), "rb").read()
        if got != want:
            sys.exit("merge-weights of the sharded checkpoint (%d bytes) differs from the FULL save (%d bytes)"
                     % (len(got), len(want)))
        log("merge-weights equals the FULL save byte for byte (%d bytes)" % len(got))
        # --unsafe_serialization: pytorch_model.bin, which Python's torch reads as the same tensors.
        run([os.path.join(a.bin, "bin", "accel"), "merge-weights", "--unsafe_serialization", ckpt, merged])
        check = ("import json, struct, sys, numpy, torch\n"
                 "raw = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', raw[:8])[0]\n"
                 "head = json.loads(raw[8:8 + n]); head.pop('__metadata__', None)\n"
                 "sd = torch.load(sys.argv[2])\n"
                 "assert sorted(sd) == sorted(head), (sorted(sd), sorted(head))\n"
                 "for k, h in head.items():\n"
                 "    assert h['dtype'] == 'F32' and list(sd[k].shape) == h['shape'], k\n"
                 "    b, e = h['data_offsets']\n"
                 "    want = numpy.frombuffer(raw[8 + n + b:8 + n + e], dtype='<f4').reshape(h['shape'])\n"
                 "    assert numpy.array_equal(sd[k].numpy(), want), k\n"
                 "print(len(sd))\n")
        py = shutil.which("python3", path="/usr/bin")
        if py and subprocess.run([py, "-c", "import torch, numpy"], capture_output=True).returncode == 0:
            p = run([py, "-c", check, os.path.join(merged, "model.safetensors"), os.path.join(merged, "pytorch_model.bin")])
            log("merge-weights --unsafe_serialization: torch.load reads the same %s tensors" % p.stdout.strip())
        else:
            log("SKIP the torch.load check of pytorch_model.bin: /usr/bin/python3 has no torch")
    resume_config = a.resume_config or a.config
    resume_np = a.resume_np or a.np
    resume_batch = a.batch * a.np // resume_np  # the same global batch
    if resume_batch * resume_np != a.batch * a.np:
        sys.exit("--resume-np %d does not divide the global batch %d" % (resume_np, a.batch * a.np))
    start(resumed, a.steps, {"ACCEL_TEST_LOAD": ckpt}, resume_config, resume_np, resume_batch)
    n = widths_numel(a.widths)
    fp, fn_ = split_result(full, n)
    rp, rn = split_result(resumed, n)
    if a.expect_sharded and a.launcher == "launch":
        expect_damaged_named(a, ckpt, tmp, e, resume_config, (("pytorch_model_fsdp_0/rank1.safetensors", "missing"),
                                                              ("optimizer_0/rank0.safetensors", "truncated"),
                                                              ("pytorch_model_fsdp_0/metadata.json", "missing"),
                                                              ("optimizer_0/metadata.json", "missing")))
        log("a missing and a truncated rank file, and a missing metadata.json, are DATA_LOSS naming the file")
    if a.launcher == "launch" and a.np == 2 and resume_np == 2 and not a.expect_deepspeed:
        expect_refused_on_every_rank(a, ckpt, tmp, e, resume_config)
        log("a truncated random_states_1.pkl is refused by every process alike (DATA_LOSS naming process 1)")
    if resume_config != a.config or resume_np != a.np:
        log("resumed on %d processes (batch %d each) with %s" % (resume_np, resume_batch, resume_config))
        check_close(fp, rp, a.tol, "parameters after resume with %s" % resume_config)
        check_close(fn_[a.steps:], rn, a.tol, "gradient norms after resume")
        shutil.rmtree(tmp, ignore_errors=True)
        return
    if fp != rp:
        check_close(fp, rp, 0.0, "parameters after resume")
    if list(fn_[a.steps:]) != list(rn):
        sys.exit("gradient norms after resume differ: %s vs %s" % (fn_[a.steps:], rn))
    log("resumed run equals the uninterrupted one bit for bit (%d parameters, %d norms)" % (len(fp), len(rn)))
    shutil.rmtree(tmp, ignore_errors=True)


def scenario_launch(a):
    """accel launch itself (cli-and-launch.md): the environment each process gets, --config_file and its
    precedence, Slurm's variables, the rank prefix, and a failing process ending the job with its status."""
    accel = os.path.join(a.bin, "bin", "accel")
    show = 'echo "ENV rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE local_world=$LOCAL_WORLD_SIZE ' \
           'addr=$MASTER_ADDR group=$GROUP_RANK mp=$ACCELERATE_MIXED_PRECISION ga=$ACCELERATE_GRADIENT_ACCUMULATION_STEPS"'

    def envs(out):
        got = sorted(re.findall(r"^\[rank(\d+)\]: ENV (.*)$", out, re.M))
        return [(int(r), dict(kv.split("=", 1) for kv in rest.split())) for r, rest in got]

    def expect(cond, what, out):
        if not cond:
            sys.exit("launch: %s\n%s" % (what, out))

    out = run([accel, "launch", "-n", "2", "--main_process_port", "0", "--mixed_precision", "bf16",
               "--gradient_accumulation_steps", "3", "sh", "-c", show]).stdout
    e = envs(out)
    expect([r for r, _ in e] == [0, 1], "expected lines prefixed [rank0]: and [rank1]:", out)
    for r, kv in e:
        expect(kv == {"rank": str(r), "local": str(r), "world": "2", "local_world": "2", "addr": "127.0.0.1",
                      "group": "0", "mp": "bf16", "ga": "3"}, "rank %d environment %s" % (r, kv), out)

    tmp = tempfile.mkdtemp(prefix="accel_launch_")
    cfg = os.path.join(tmp, "default_config.yaml")
    with open(cfg, "w") as f:
        f.write("compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_CPU\nfsdp_config:\n  sharding: 1\n"
                "gradient_accumulation_steps: 5\nmixed_precision: fp16\nnum_processes: 3\nuse_cpu: true\n")
    out = run([accel, "launch", "--config_file", cfg, "--main_process_port", "0", "--gradient_accumulation_steps", "2",
               "sh", "-c", show]).stdout
    e = envs(out)
    expect([r for r, _ in e] == [0, 1, 2], "the config file's num_processes: 3", out)
    expect(all(kv["mp"] == "fp16" and kv["ga"] == "2" and kv["world"] == "3" for _, kv in e),
           "mixed_precision from the file, gradient_accumulation_steps from the command line", out)

    slurm = dict(env_base(), SLURM_NNODES="2", SLURM_NODEID="1", SLURM_JOB_NODELIST="node[3-4]")
    out = run([accel, "launch", "-n", "4", "--main_process_port", "29511", "sh", "-c", show], env=slurm).stdout
    e = envs(out)
    expect([r for r, _ in e] == [2, 3], "machine 1 of 2 (SLURM_NODEID) runs ranks 2 and 3", out)
    for r, kv in e:
        expect(kv["local"] == str(r - 2) and kv["world"] == "4" and kv["local_world"] == "2" and
               kv["addr"] == "node3" and kv["group"] == "1", "rank %d under Slurm: %s" % (r, kv), out)

    t0 = time.time()
    p = run([accel, "launch", "-n", "2", "--main_process_port", "0", "sh", "-c",
             'if [ "$RANK" = 1 ]; then echo failing; exit 3; fi; sleep 60'], check=False)
    took = time.time() - t0
    expect(p.returncode == 3, "exit status %d, expected the failing process's 3" % p.returncode, p.stdout)
    expect(took < 30, "the other process was not stopped (%.1f s)" % took, p.stdout)
    expect("[rank1]: failing" in p.stdout, "the failing rank's output", p.stdout)
    log("launch: environment, config file, Slurm and failure handling as expected (failure ended the job in %.1f s)"
        % took)
    shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--bin", required=True, help="the build directory")
    ap.add_argument("--launcher", default="launch")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--config", default="{}")
    ap.add_argument("--ref-config", default=None)
    ap.add_argument("--resume-config", default=None, help="resume: the config of the resumed half (default --config)")
    ap.add_argument("--resume-np", type=int, default=0, help="resume: processes of the resumed half (the global "
                    "batch stays the same)")
    ap.add_argument("--expect-sharded", action="store_true", help="resume: the checkpoint is SHARDED_STATE_DICT")
    ap.add_argument("--expect-deepspeed", type=int, default=0, help="resume: the checkpoint is DeepSpeed's layout "
                    "of this ZeRO stage (files, merge-weights, zero_to_fp32, damaged files)")
    ap.add_argument("--reload-in-process", action="store_true", help="resume: also load the checkpoint back into "
                    "the saving run's objects 2 steps later and train on (equal to the uninterrupted run)")
    ap.add_argument("--async-save", action="store_true", help="resume: the checkpoint is saved with {\"async\": true}")
    ap.add_argument("--merge-full-config", default=None, help="resume: also save with this (FULL) config and check "
                    "that accel merge-weights of the sharded checkpoint equals it byte for byte")
    ap.add_argument("--widths", default="8,32,32,4")
    ap.add_argument("--gpt", default=None, help="train dist_train's gpt model: plain or checkpointing; or its llama model: llama")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--expect-param-offload", choices=["cpu", "nvme"], default=None,
                    help="equivalence: check the parameter offload accounting against the reference run")
    ap.add_argument("--expect-offload", choices=["cpu", "nvme"], default=None,
                    help="equivalence: check the optimizer offload accounting against the reference run")
    ap.add_argument("--max-peak-optimizer-bytes", type=int, default=0,
                    help="equivalence with --expect-offload: the bound on every rank's peak_optimizer_state_bytes")
    ap.add_argument("--timeout", type=int, default=120)
    ap.add_argument("--expect-backend", default=None)
    ap.add_argument("--min-buckets", type=int, default=0)
    ap.add_argument("--expect-syncs", type=int, default=0, help="DDP's synchronised backward passes on rank 0")
    ap.add_argument("--machines", type=int, default=1, help="equivalence, resume: the candidate (the saving runs) as this many launches of "
                    "--num_machines on this host (--np processes over all of them)")
    ap.add_argument("--ref-np", type=int, default=1, help="processes of the reference run (1: batch np*B alone)")
    ap.add_argument("--env", action="append", help="KEY=VALUE for the test programs (repeatable)")
    ap.add_argument("--num-params", type=int, default=0,
                    help="equivalence: the values dist_train writes for the parameters, when the model's spec does not "
                         "say it (a quantized base: one value per stored byte)")
    ap.add_argument("--expect-different", action="store_true",
                    help="equivalence: fail when the weights are bitwise those of the reference (a 16-bit run)")
    ap.add_argument("--expect-peak-gathered", type=int, default=0,
                    help="equivalence: every rank's peak_gathered_bytes must be exactly this")
    ap.add_argument("--memory-ratio", type=float, default=0.0,
                    help="fail when a rank's model state exceeds this multiple of the reference's")
    ap.add_argument("--param-ratio", type=float, default=0.0,
                    help="fail when a rank's parameter bytes exceed this multiple of the reference's")
    a = ap.parse_args()
    fn = globals().get("scenario_" + a.scenario)
    if fn is None:
        sys.exit("unknown scenario " + a.scenario)
    rc = fn(a)
    sys.exit(rc or 0)


if __name__ == "__main__":
    main()
