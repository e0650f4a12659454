#!/usr/bin/env python3
"""The rendezvous admits only the job's processes (issue 40.4; src/distributed/store_server.cpp).

Usage: run_rdzv.py --bin BUILD_DIR
  `accel launch` starts a 2-process job (dist_rdzv: all-reduces checked every round until told to stop) with no
  token of the user's, so the launcher generates one. While it runs:
  - the token is in the workers' environment (64 hex digits, the same on both) and on no process's command line;
  - a process with a wrong token is refused (exit 3, PERMISSION_DENIED naming the token), and one with none fails;
  - 1,000 connections to the store port send random bytes, oversized messages (up to 2 MB), and, after a correct
    handshake (the test read the token), malformed and oversized frames;
  then the job is told to stop and must end with status 0, every sum right on both ranks, rank 0's log naming a
  refused peer's address, and the token in no output."""
import argparse
import hashlib
import hmac
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from ports import free_port

MAGIC = b"ACCELRDZV1"


class Reader:
    def __init__(self, proc):
        self.lines = []
        self.t = threading.Thread(target=self.run, args=(proc,), daemon=True)
        self.t.start()

    def run(self, proc):
        for line in proc.stdout:
            self.lines.append(line.rstrip("\n"))
            print("job| " + line.rstrip("\n"), flush=True)

    def text(self):
        return "\n".join(self.lines)


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, ValueError, IndexError):
                pass
    return out


def environ(pid):
    with open("/proc/%d/environ" % pid, "rb") as f:
        return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)


def command_lines():
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    yield f.read()
            except OSError:
                pass


def stranger(bin_dir, port, stop, token):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_RDZV_TOKEN")}
    env.update(RANK="1", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if token is not None:
        env["ACCEL_RDZV_TOKEN"] = token
    p = subprocess.run([os.path.join(bin_dir, "tests/distributed/dist_rdzv"), stop, "3"], env=env, timeout=60,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("stranger (token %s): exit %d: %s" % ("wrong" if token else "none", p.returncode, p.stdout.strip()[-400:]),
          flush=True)
    return p


def attack(port, token, n=1000):
    """n connections of garbage; returns how many of each kind were sent."""
    kinds = {"random": 0, "oversized": 0, "authenticated garbage": 0}
    rng = random.Random(40)
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            roll = rng.random()
            if roll < 0.7:
                kinds["random"] += 1
                s.sendall(rng.randbytes(rng.randrange(0, 300)))
            elif roll < 0.8:
                kinds["oversized"] += 1
                s.sendall(rng.randbytes(rng.randrange(256 << 10, 2 << 20)))
            else:
                kinds["authenticated garbage"] += 1
                nc = os.urandom(32)
                s.sendall(MAGIC + nc)  # the client's greeting comes first
                hello = b""
                while len(hello) < 42:
                    part = s.recv(42 - len(hello))
                    if not part:
                        raise OSError("closed")
                    hello += part
                ns = hello[10:]
                s.sendall(MAGIC + nc + hmac.new(token, b"client" + ns + nc, hashlib.sha256).digest())
                verdict = s.recv(33)
                if not verdict.startswith(b"Y"):
                    sys.exit("the store refused the job's own token: %r" % verdict[:1])
                pick = rng.randrange(4)
                if pick == 0:  # a length past the bound
                    s.sendall(struct.pack(">I", rng.choice([0, 0xFFFFFFFF, (16 << 20) + 1])))
                elif pick == 1:  # an unknown operation
                    body = bytes([rng.randrange(10, 256)]) + rng.randbytes(rng.randrange(0, 64))
                    s.sendall(struct.pack(">I", len(body)) + body)
                elif pick == 2:  # a known operation whose argument runs past the end
                    body = bytes([rng.randrange(2, 10)]) + struct.pack(">I", 1000) + b"x"
                    s.sendall(struct.pack(">I", len(body)) + body)
                else:  # a frame announced longer than what comes
                    s.sendall(struct.pack(">I", 64) + b"\x02" * 10)
                    s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the store closed it first: what it should do
        finally:
            s.close()
    return kinds


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="accel-rdzv-")
    stop = os.path.join(tmp, "stop")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCEL_RDZV_TOKEN")}
    job = subprocess.Popen([os.path.join(a.bin, "bin", "accel"), "launch", "--num_processes", "2", "--main_process_port",
                            str(port), os.path.join(a.bin, "tests/distributed/dist_rdzv"), stop, "20"],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = Reader(job)
    t0 = time.time()
    try:
        while not all(("rank %d: ready" % r) in out.text() for r in (0, 1)):
            if job.poll() is not None or time.time() - t0 > 60:
                sys.exit("the job did not get ready")
            time.sleep(0.05)
        workers = children(job.pid)
        tokens = {environ(w).get(b"ACCEL_RDZV_TOKEN") for w in workers}
        if len(workers) != 2 or len(tokens) != 1 or not re.fullmatch(rb"[0-9a-f]{64}", next(iter(tokens)) or b""):
            sys.exit("expected 2 workers with the same generated 64-hex-digit token, got %s" % tokens)
        token = next(iter(tokens))
        if any(token in c for c in command_lines()):
            sys.exit("the token is on a process's command line")
        wrong = stranger(a.bin, port, stop, "not-the-token")
        if wrong.returncode != 3 or "PERMISSION_DENIED" not in wrong.stdout or "refused this process's token" not in wrong.stdout:
            sys.exit("a process with a wrong token was not refused by name")
        none = stranger(a.bin, port, stop, None)
        if none.returncode != 3:
            sys.exit("a process without a token was not refused")
        t1 = time.time()
        kinds = attack(port, token)
        print("run_rdzv: 1000 connections (%s) in %.1f s" % (kinds, time.time() - t1), flush=True)
        if job.poll() is not None:
            sys.exit("the job ended during the attack")
        open(stop, "w").close()
        rc = job.wait(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    out.t.join(timeout=5)
    text = out.text()
    if rc != 0:
        sys.exit("the job failed (exit %d)" % rc)
    for r in (0, 1):
        if ("rank %d: done after" % r) not in text or "every sum right" not in text:
            sys.exit("rank %d did not end with every sum right" % r)
    if not re.search(r"accel rendezvous: error: refused the connection from 127\.0\.0\.1:\d+", text):
        sys.exit("rank 0 did not log a refused peer's address")
    if token.decode() in text:
        sys.exit("the token appears in the job's output")
    print("run_rdzv: ok: the job finished correctly in %.1f s; strangers refused" % (time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
