"""Object collectives: Accelerate's pickled gather_object / broadcast_object_list, bytes and JSON, in one process
and on two processes under `accel launch` (the C-level checks on 2 and 3 processes: tests/distributed/dist_objects.c)."""

import os
import subprocess
import sys

import pytest

import accel


def test_pickled_objects_as_accelerate():
    with accel.Accelerator() as acc:
        assert acc.gather_object([1, "two", {"three": 3.0}]) == [1, "two", {"three": 3.0}]
        assert acc.gather_object([]) == []
        items = [None, b"\x00bytes", (1, 2)]
        same = acc.broadcast_object_list(items)
        assert same is items and items == [None, b"\x00bytes", (1, 2)]


def test_bytes_and_json():
    with accel.Accelerator() as acc:
        assert acc.gather_object_bytes(b"a\x00b") == [b"a\x00b"]
        assert acc.gather_object_bytes(bytearray()) == [b""]
        assert acc.broadcast_object_bytes(memoryview(b"xyz")) == b"xyz"
        assert acc.broadcast_object_bytes_list([b"alpha", b"", b"\x01"]) == [b"alpha", b"", b"\x01"]
        assert acc.gather_object_json('[1, {"a": 2}]') == '[1, {"a": 2}]'
        assert acc.broadcast_object_json('{"k": [true]}') == '{"k": [true]}'


def test_bad_inputs():
    with accel.Accelerator() as acc:
        with pytest.raises(accel.InvalidArgumentError, match="expected a JSON array"):
            acc.gather_object_json('{"a": 1}')
        with pytest.raises(accel.InvalidArgumentError, match="malformed JSON"):
            acc.broadcast_object_json("[1,")
        with pytest.raises(accel.OutOfRangeError, match="from_process"):
            acc.broadcast_object_bytes(b"x", 1)
        with pytest.raises(accel.OutOfRangeError, match="index"):
            acc.gather_object_list(b"x").item_size(1)
        with pytest.raises(TypeError):
            acc.gather_object_bytes("text is not bytes")


TWO_PROCESSES = r"""
import accel
with accel.Accelerator() as acc:
    r, p = acc.process_index(), acc.num_processes()
    assert acc.gather_object([r, {"rank": r}]) == [x for q in range(p) for x in (q, {"rank": q})]
    items = ["x", b"\0y", (3,)] if r == 1 else [None]
    assert acc.broadcast_object_list(items, from_process=1) == ["x", b"\0y", (3,)] and len(items) == 3
    assert acc.gather_object_bytes(bytes([r]) * r) == [bytes([q]) * q for q in range(p)]
    assert acc.broadcast_object_bytes(b"from 0" if r == 0 else b"") == b"from 0"
    assert acc.gather_object_json("[%d]" % r) == "[" + ", ".join(str(q) for q in range(p)) + "]"
    print("objects ok", r, flush=True)
"""


def test_two_processes():
    build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(accel._core.__file__)))))
    launcher = os.path.join(build, "bin", "accel")
    if not os.path.exists(launcher):
        pytest.skip("no accel launcher at " + launcher)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([launcher, "launch", "-n", "2", "--main_process_port", "0", sys.executable, "-c", TWO_PROCESSES],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stdout
    # accel launch prefixes each process's lines with "[rank<r>]: ".
    assert sorted(l.split("objects ok ")[1] for l in p.stdout.splitlines() if "objects ok " in l) == ["0", "1"], p.stdout
