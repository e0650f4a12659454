#!/usr/bin/env python3
"""The damage matrix (issue 42.3): a checkpoint saved by 2 processes over Gloo, in one layout (plain DDP folder,
SHARDED_STATE_DICT, DeepSpeed ZeRO-3), is copied once per case with one file damaged: deleted, emptied, cut to
half, 8 bytes flipped at its head, middle or end, or (JSON and `latest`) its text edited. One launch of
dist_damage.c loads every case on 2 processes. Each case must either fail on every process with the same
status, or load exactly the saved state (the same evaluation loss, training step and loss after it, to the bit,
as the intact copy): never a mix, never silently different. Every file accel writes is recorded, so every
damage must fail with DATA_LOSS, except deleting a record (accel_checksums.json), which leaves a folder such
as Accelerate or DeepSpeed write: it must load exactly.

run_damage.py --bin BUILD --layout NAME --config JSON
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def log(*a):
    print(*a, flush=True)


def env_base():
    e = dict(os.environ)
    e["OMP_NUM_THREADS"] = "1"
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "ACCEL_CHECKPOINT_VERIFY"):
        e.pop(k, None)
    return e


def launch(a, args, timeout):
    cmd = [os.path.join(a.bin, "bin", "accel"), "launch", "-n", "2", "--main_process_port", "0",
           os.path.join(a.bin, "tests", "distributed", "dist_damage"), *args]
    log("$", " ".join(cmd))
    t0 = time.time()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                       env=env_base())
    log("(exit %d after %.1f s)" % (p.returncode, time.time() - t0))
    if p.returncode != 0:
        log(p.stdout[-6000:])
        sys.exit("command failed with status %d" % p.returncode)
    return p.stdout


def flip(path, where):
    data = bytearray(open(path, "rb").read())
    if not data:
        return False
    at = {"head": 0, "middle": len(data) // 2, "end": max(0, len(data) - 8)}[where]
    for i in range(at, min(at + 8, len(data))):
        data[i] ^= 0xFF
    open(path, "wb").write(bytes(data))
    return True


def edit_text(path):
    """Changes the first digit (a size, shape, offset, version...) or, without digits, the last letter."""
    text = open(path, "rb").read()
    m = re.search(rb"[0-9]", text)
    if m:
        i = m.start()
        text = text[:i] + (b"1" if text[i:i + 1] != b"1" else b"2") + text[i + 1:]
    else:
        m = list(re.finditer(rb"[A-Za-z]", text))[-1]
        text = text[:m.start()] + b"x" + text[m.start() + 1:]
    open(path, "wb").write(text)


def damage(path, how):
    if how == "delete":
        os.remove(path)
    elif how == "empty":
        open(path, "wb").close()
    elif how == "truncate":
        os.truncate(path, os.path.getsize(path) // 2)
    elif how.startswith("flip_"):
        flip(path, how[5:])
    elif how == "edit":
        edit_text(path)


def remove_records(folder):
    """Removes accel's records of the files: every accel_checksums.json and the checksums of metadata.json."""
    for root, _, fs in os.walk(folder):
        for name in fs:
            path = os.path.join(root, name)
            if name == "accel_checksums.json":
                os.remove(path)
            elif name == "metadata.json":
                meta = json.load(open(path))
                meta.pop("checksums", None)
                meta.pop("self_crc32", None)
                json.dump(meta, open(path, "w"), indent=2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--layout", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--timeout", type=float, default=240)
    a = ap.parse_args()
    t_start = time.time()
    tmp = tempfile.mkdtemp(prefix="accel_damage_")
    try:
        ckpt = os.path.join(tmp, "ckpt")
        launch(a, ["save", ckpt, a.config], 120)
        files = sorted(os.path.relpath(os.path.join(d, f), ckpt) for d, _, fs in os.walk(ckpt) for f in fs)
        log("saved (%s): %s" % (a.layout, ", ".join(files)))
        if not any(f.endswith("accel_checksums.json") for f in files):
            sys.exit("the checkpoint has no accel_checksums.json")
        cases = [("(intact)", "none")]
        for f in files:
            hows = ["delete", "empty", "truncate", "flip_head", "flip_middle", "flip_end"]
            if f.endswith(".json") or os.path.basename(f) == "latest":
                hows.append("edit")
            cases += [(f, h) for h in hows]
        # `latest` as DeepSpeed writes it (its own tag name, no record of accel's): followed; naming a tag that is
        # not there: DATA_LOSS naming `latest`.
        if "latest" in files:
            cases += [("latest", "renamed_tag"), ("latest", "missing_tag")]
        # Rank files (each process's own) deleted, emptied or truncated in a folder without accel's records, as
        # Accelerate and DeepSpeed write them: still DATA_LOSS, from the readers' own checks.
        rank_file = re.compile(r"(^|/)(rank\d+\.safetensors|random_states_\d+\.pkl|.*rank_\d+_mp_rank_00_\w+_states\.pt)$")
        for f in files:
            if rank_file.search(f):
                # (A missing random_states_{r}.pkl is an inexact resume with a warning, as in Accelerate, not damage.)
                hows = ("empty", "truncate") if "random_states" in f else ("delete", "empty", "truncate")
                cases += [(f, "norecord_" + h) for h in hows]
        case_dirs = []
        for i, (f, how) in enumerate(cases):
            d = os.path.join(tmp, "case%03d" % i)
            shutil.copytree(ckpt, d)
            case_dirs.append(d)
            if how in ("renamed_tag", "missing_tag") or how.startswith("norecord_"):
                remove_records(d)
            if how.startswith("norecord_"):
                damage(os.path.join(d, f), how[len("norecord_"):])
            elif how in ("renamed_tag", "missing_tag"):
                tag = open(os.path.join(d, "latest")).read().strip()
                os.rename(os.path.join(d, tag), os.path.join(d, "global_step3"))
                open(os.path.join(d, "latest"), "w").write("global_step3" if how == "renamed_tag" else "global_step9")
            elif how != "none":
                damage(os.path.join(d, f), how)
        listing = os.path.join(tmp, "cases.txt")
        open(listing, "w").write("".join(d + "\n" for d in case_dirs))
        t_load = time.time()
        out = launch(a, ["load", listing, a.config], a.timeout)
        load_seconds = time.time() - t_load
        results = {}  # (rank, case) -> (status, values)
        messages = {}
        for line in out.splitlines():
            m = re.match(r"\[rank(\d)\]: case (\d+) (\S+)(.*)$", line)
            if m:
                results[(int(m.group(1)), int(m.group(2)))] = (m.group(3), m.group(4).split())
            m = re.match(r"\[rank(\d)\]: message (\d+) (.*)$", line)
            if m:
                messages[(int(m.group(1)), int(m.group(2)))] = m.group(3)
        problems = []
        ref = [results.get((r, 0)) for r in (0, 1)]
        if any(x is None or x[0] != "ACCEL_OK" for x in ref):
            sys.exit("the intact copy did not load on both processes: %s: %s" % (ref, messages.get((0, 0))))
        table = {}
        for i, (f, how) in enumerate(cases):
            got = [results.get((r, i)) for r in (0, 1)]
            if any(g is None for g in got):
                problems.append("case %d (%s %s): a process reported nothing" % (i, f, how))
                continue
            statuses = {g[0] for g in got}
            if len(statuses) != 1:
                problems.append("case %d (%s %s): a mix: %s" % (i, f, how, got))
                continue
            status = got[0][0]
            table.setdefault(f, []).append("%s:%s" % (how, "OK" if status == "ACCEL_OK" else status.replace("ACCEL_ERR_", "")))
            if status == "ACCEL_OK":
                if got[0][1] != ref[0][1] or got[1][1] != ref[1][1]:
                    problems.append("case %d (%s %s): loaded, but not the saved state: %s vs %s" % (i, f, how, got, ref))
            expect_ok = how in ("none", "renamed_tag") or (how == "delete" and f.endswith("accel_checksums.json"))
            if expect_ok and status != "ACCEL_OK":
                problems.append("case %d (%s %s): expected to load exactly, got %s: %s" % (i, f, how, status, messages.get((0, i))))
            if not expect_ok and status != "ACCEL_ERR_DATA_LOSS":
                problems.append("case %d (%s %s): expected DATA_LOSS on every process, got %s: %s"
                                % (i, f, how, status, messages.get((0, i))))
            if how == "missing_tag" and "latest" not in messages.get((0, i), ""):
                problems.append("case %d: the message does not name `latest`: %s" % (i, messages.get((0, i))))
        for f in files + (["latest"] if "latest" in files else []):
            if f in table:
                log("  %-52s %s" % (f, " ".join(table.pop(f))))
        log("%d cases; loading all of them on 2 processes took %.1f s; the whole run %.1f s"
            % (len(cases), load_seconds, time.time() - t_start))
        if problems:
            for p in problems:
                log("FAIL:", p)
            for i in range(min(3, len(cases))):
                log("message of case %d: %s" % (i, messages.get((0, i))))
            sys.exit("%d of %d cases failed" % (len(problems), len(cases)))
        log("every case failed alike on both processes (DATA_LOSS) or loaded exactly the saved state")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
