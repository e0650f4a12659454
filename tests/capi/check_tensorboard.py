#!/usr/bin/env python3
"""Reads back what the trackers wrote (capi_test_tracking write DIR), independently of accel:
TensorBoard event files decoded with Debian's python3-protobuf from the same tensorboard.proto (compiled
here with protoc), every TFRecord length and payload CRC-32C checked (the crc32c module when installed,
else a bitwise CRC written here); JSONL and CSV parsed with the standard library.
With --nproc 2 the writer runs under `accel launch -n 2`: the files must be written once, by rank 0."""
import argparse
import csv
import glob
import json
import os
import struct
import subprocess
import sys
import tempfile


def crc32c_bitwise(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


try:
    import crc32c as _crc32c_mod  # python3-crc32c, when installed
    crc32c = _crc32c_mod.crc32c
except ImportError:
    crc32c = crc32c_bitwise


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """TFRecord framing; fails on any bad CRC or a truncated record."""
    with open(path, "rb") as f:
        buf = f.read()
    pos, out = 0, []
    while pos < len(buf):
        if pos + 12 > len(buf):
            sys.exit("%s: truncated record header at byte %d" % (path, pos))
        header = buf[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", buf[pos + 8:pos + 12])
        if hcrc != masked(header):
            sys.exit("%s: bad length CRC at byte %d" % (path, pos))
        data = buf[pos + 12:pos + 12 + length]
        if len(data) != length or pos + 16 + length > len(buf):
            sys.exit("%s: truncated record at byte %d" % (path, pos))
        (dcrc,) = struct.unpack("<I", buf[pos + 12 + length:pos + 16 + length])
        if dcrc != masked(data):
            sys.exit("%s: bad data CRC at byte %d" % (path, pos))
        out.append(data)
        pos += 16 + length
    return out


def load_proto(proto, work):
    """The Python module protoc generates from `proto` (into work/gen), imported."""
    gen = os.path.join(work, "gen")
    os.makedirs(gen, exist_ok=True)
    proto_dir, proto_file = os.path.split(os.path.abspath(proto))
    subprocess.run(["protoc", "-I" + proto_dir, "--python_out=" + gen, proto_file], check=True)
    sys.path.insert(0, gen)
    return __import__(proto_file.replace(".proto", "_pb2"))


def expect(cond, what):
    if not cond:
        sys.exit("check_tensorboard: " + what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writer", required=True)
    ap.add_argument("--proto", required=True)
    ap.add_argument("--accel", help="the accel program (for --nproc > 1)")
    ap.add_argument("--nproc", type=int, default=1)
    a = ap.parse_args()

    # RFC 3720's CRC-32C test vector, through whichever CRC this run uses, and the bitwise one agrees.
    expect(crc32c(bytes(32)) == 0x8A9136AA and crc32c_bitwise(bytes(range(32))) == crc32c(bytes(range(32))),
           "CRC-32C test vectors")

    work = tempfile.mkdtemp(prefix="accel_tb_")
    pb = load_proto(a.proto, work)

    cmd = [a.writer, "write", work]
    if a.nproc > 1:
        cmd = [a.accel, "launch", "-n", str(a.nproc), "--main_process_port", "0"] + cmd
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True, timeout=150)
    expect(p.returncode == 0, "the writer failed:\n" + p.stdout)

    run = os.path.join(work, "logs", "run1")
    events = glob.glob(os.path.join(run, "events.out.tfevents.*"))
    expect(len(events) == 1, "expected one event file (written once), found %s\n%s" % (events, p.stdout))
    expect(events[0].endswith(".test"), "filename_suffix")
    expect(p.stdout.count("CALLBACK init=1 log=5 finish=1") == 1, "the callback tracker ran once:\n" + p.stdout)
    if a.nproc > 1:
        expect(p.stdout.count("CALLBACK init=0 log=0 finish=0") == a.nproc - 1, "other ranks run no tracker:\n" + p.stdout)
        expect(p.stdout.count('"main_process":false') == a.nproc - 1, "blank tracker on other ranks:\n" + p.stdout)

    recs = records(events[0])
    evs = []
    for r in recs:
        e = pb.Event()
        e.ParseFromString(r)
        evs.append(e)
    expect(evs[0].file_version == "brain.Event:2", "first event is the file version")
    cfg = evs[1].summary.value[0]
    expect(cfg.tag == "config/text_summary" and cfg.metadata.plugin_data.plugin_name == "text", "config text summary")
    expect(cfg.tensor.dtype == pb.DT_STRING and [d.size for d in cfg.tensor.tensor_shape.dim] == [1], "text tensor")
    expect(json.loads(cfg.tensor.string_val[0].decode()) == {"lr": 0.1, "model": "mlp"}, "run config")
    scalars, texts = {}, {}
    for e in evs[2:]:
        expect(e.wall_time > 1.6e9, "wall_time")
        for v in e.summary.value:
            if v.WhichOneof("value") == "simple_value":
                scalars[(v.tag, e.step)] = v.simple_value
            else:
                texts[(v.tag, e.step)] = v.tensor.string_val[0].decode()
    for step in range(5):
        expect(abs(scalars[("loss", step)] - 1.0 / (step + 1)) < 1e-6, "loss at step %d" % step)
        expect(abs(scalars[("lr", step)] - 0.1 * step) < 1e-6, "lr at step %d" % step)
    expect(abs(scalars[("eval/accuracy", 2)] - 0.5) < 1e-7, "nested key as eval/accuracy")
    expect(texts == {("note/text_summary", 2): "half way"}, "text value: %s" % texts)
    expect(len(scalars) == 11, "scalar count %d" % len(scalars))

    lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
    expect(len(lines) == 6, "metrics.jsonl: %d lines (written once: 1 config + 5 logs)" % len(lines))
    expect(lines[0] == {"project": "run1", "config": {"lr": 0.1, "model": "mlp"}}, "jsonl config line")
    expect([l["step"] for l in lines[1:]] == [0, 1, 2, 3, 4] and lines[3]["values"]["note"] == "half way",
           "jsonl steps and values")
    rows = list(csv.DictReader(open(os.path.join(run, "metrics.csv"))))
    expect(len(rows) == 5 * 2 + 2, "metrics.csv: %d rows" % len(rows))
    expect(rows[0]["key"] == "loss" and float(rows[0]["value"]) == 1.0 and rows[0]["step"] == "0", "csv first row")
    expect(json.load(open(os.path.join(run, "config.json"))) == {"lr": 0.1, "model": "mlp"}, "csv's config.json")
    print("check_tensorboard: %d events, %d records with valid CRCs (%s), jsonl %d lines, csv %d rows, %d process(es)"
          % (len(evs), len(recs), "crc32c module" if crc32c is not crc32c_bitwise else "bitwise CRC", len(lines),
             len(rows), a.nproc))
    subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
