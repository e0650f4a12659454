"""save_state / load_state pre-hooks from Python (any callable, or a StateHook subclass) and join_uneven_inputs
in one process (the C-level checks: tests/capi/test_state_hooks.c, tests/capi/test_join.c,
tests/distributed/dist_join.c)."""

import os

import pytest

import accel

MODEL = '{"type": "mlp", "widths": [4, 2]}'


def prepared(acc):
    model = accel.Model.from_json(MODEL)
    opt = accel.Optimizer(model, '{"type": "sgd", "lr": 0.1}')
    acc.prepare(model, opt)
    return model, opt


def test_hooks_add_and_read_files(tmp_path):
    calls = []

    def save_hook(folder, index):
        calls.append(("save", index))
        with open(os.path.join(folder, "extra.txt"), "w") as f:
            f.write("from python")

    class LoadHook(accel.StateHook):
        def call(self, folder, index):
            with open(os.path.join(folder, "extra.txt")) as f:
                calls.append(("load", index, f.read()))

    with accel.Accelerator() as acc:
        keep = prepared(acc)
        save_handle = acc.register_save_state_pre_hook(save_hook)
        acc.register_load_state_pre_hook(LoadHook())
        ckpt = str(tmp_path / "ckpt")
        acc.save_state(ckpt)
        assert os.path.exists(os.path.join(ckpt, "extra.txt"))
        acc.load_state(ckpt)
        assert calls == [("save", 0), ("load", 0, "from python")]
        save_handle.remove()
        save_handle.remove()  # RemovableHandle.remove(): a second call does nothing
        acc.save_state(str(tmp_path / "again"))
        assert not os.path.exists(str(tmp_path / "again" / "extra.txt"))
        del keep


def test_a_raising_hook_fails_the_call_naming_it(tmp_path):
    def refuse(folder, index):
        raise RuntimeError("no room for this")

    with accel.Accelerator() as acc:
        keep = prepared(acc)
        handle = acc.register_save_state_pre_hook(refuse)
        with pytest.raises(accel.AccelError, match=r"pre-hook %d failed.*no room for this" % handle.id):
            acc.save_state(str(tmp_path / "refused"))
        assert not os.path.exists(str(tmp_path / "refused"))
        with pytest.raises(TypeError, match="hook"):
            acc.register_load_state_pre_hook(42)
        with pytest.raises(accel.NotFoundError):
            acc.remove_state_hook(12345)
        del keep


def test_join_uneven_inputs_in_one_process():
    with accel.Accelerator() as acc:
        model, opt = prepared(acc)
        with acc.join_uneven_inputs([model], even_batches=False):
            pass
        with acc.join_uneven_inputs(None):
            with pytest.raises(accel.FailedPreconditionError, match="does not nest"):
                acc.join_uneven_inputs_begin(None, -1)
        with pytest.raises(accel.FailedPreconditionError, match="no matching"):
            acc.join_uneven_inputs_end()


def test_save_named_tensors(tmp_path):
    import json
    import struct
    with accel.Accelerator() as acc:
        w = accel.tensor([[1.0, 2.0], [3.0, 4.0]])
        path = str(tmp_path / "t.safetensors")
        acc.save({"w": w}, path)
        data = open(path, "rb").read()
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8:8 + n])
        assert header["w"]["dtype"] == "F32" and header["w"]["shape"] == [2, 2]
        assert struct.unpack("<4f", data[8 + n:]) == (1.0, 2.0, 3.0, 4.0)
