"""The bindings' smoke scenario (conventions.md, "Tests") and the Python-specific mappings."""

import array
import gc
import json
import os
import tempfile
import threading
import time

import pytest

import accel

MODEL = '{"type": "mlp", "widths": [4, 8, 3]}'


def make_data(n=16):
    x = array.array("f", [((i * 7 + j * 3) % 11) / 11.0 for i in range(n) for j in range(4)])
    y = array.array("q", [i % 3 for i in range(n)])
    return accel.tensor(x, shape=[n, 4]), accel.tensor(y, shape=[n])


def test_profile_writes_a_chrome_trace():
    # accelerator.profile(): warmup 1 + active 1 over 2 optimizer steps keeps step 1 only (step 2 is the next
    # cycle's warmup, dropped at the end); no output_trace_dir is refused.
    with pytest.raises(accel.FailedPreconditionError, match="output_trace_dir"):
        with accel.Accelerator().profile():
            pass
    with tempfile.TemporaryDirectory() as d:
        profile = {"output_trace_dir": d, "schedule_option": {"wait": 0, "warmup": 1, "active": 1}}
        acc = accel.Accelerator(json.dumps({"kwargs_handlers": {"profile": profile}}))
        model = accel.Model.from_json(MODEL)
        opt = accel.Optimizer(model, '{"type": "sgd", "lr": 0.1}')
        features, labels = make_data(8)
        dl = accel.DataLoader(features, labels, '{"batch_size": 4}')
        acc.prepare(model, opt, dl)
        with acc.profile():
            for batch in dl:
                acc.backward(accel.compute_loss("cross_entropy", model.forward(batch.inputs()), batch.labels()))
                opt.step()
                opt.zero_grad()
        with open(os.path.join(d, "profile_0.json")) as f:
            names = [e["name"] for e in json.load(f)["traceEvents"]]
        assert "aten::addmm" in names and names.count("accel::forward") == 1, sorted(set(names))
        assert [n for n in names if n.startswith("ProfilerStep#")] == ["ProfilerStep#1"]


def test_import_checks_abi():
    assert accel.abi_version() == accel._core.BUILT_ABI_VERSION
    assert accel.version_string() == accel.__version__
    assert '"' in accel.build_info_json()


def test_smoke_scenario():
    accel.set_seed(0)
    acc = accel.Accelerator('{"gradient_accumulation_steps": 2}')
    model = accel.Model.from_json(MODEL)
    opt = accel.Optimizer(model, '{"type": "sgd", "lr": 0.1}')
    sched = accel.Scheduler(opt, '{"type": "linear", "num_warmup_steps": 0, "num_training_steps": 10}')
    features, labels = make_data(24)   # 6 batches: 2 trained, 2 after the save, repeated after the load, 1 more
    dl = accel.DataLoader(features, labels, '{"batch_size": 4}')
    acc.prepare(model, opt, dl, sched)
    assert acc.gradient_accumulation_steps() == 2

    before = model.get_tensor(model.parameter_name(0)).tolist()
    syncs = []
    for i, batch in zip(range(2), dl):   # two micro-steps = one optimizer step
        with acc.accumulate(model):
            loss = accel.compute_loss("cross_entropy", model.forward(batch.inputs()), batch.labels())
            assert loss.item() > 0.0
            acc.backward(loss)
            opt.step()
            sched.step()
            opt.zero_grad()
            syncs.append(acc.sync_gradients())
    assert syncs == [False, True]
    assert acc.step() == 2
    assert sched.get_step_count() == 1
    after = model.get_tensor(model.parameter_name(0)).tolist()
    assert after != before, "the optimizer step changed no weight"

    # save_state / load_state: two more steps after the load repeat the two steps after the save exactly
    # (weights, optimizer, scheduler, accumulate()'s step and the loader's position are restored).
    with tempfile.TemporaryDirectory() as d:
        ckpt = os.path.join(d, "ckpt")
        # Saved asynchronously: the two steps below run while the files are written, and change nothing in them.
        assert acc.save_state(ckpt, '{"async": true}') == ckpt
        saved = model.get_tensor(model.parameter_name(0)).tolist()
        saved_counts = (acc.step(), sched.get_step_count())

        def two_steps():
            for _ in range(2):
                with dl.next_batch() as batch:
                    acc.train_step(model, opt, sched, batch, "cross_entropy")   # enters accumulate() itself
            return model.get_tensor(model.parameter_name(0)).tolist(), acc.step(), sched.get_step_count()

        first = two_steps()
        acc.wait_for_checkpoint()
        assert os.path.isfile(os.path.join(ckpt, "model.safetensors"))
        assert first[0] != saved and first[1] == saved_counts[0] + 2
        assert acc.load_state(ckpt) == ckpt
        assert model.get_tensor(model.parameter_name(0)).tolist() == saved
        assert (acc.step(), sched.get_step_count()) == saved_counts
        assert two_steps() == first

    # An invalid config raises InvalidArgumentError (also a ValueError) naming the JSON path.
    with pytest.raises(accel.InvalidArgumentError) as info:
        accel.Accelerator('{"kwargs_handlers": {"autocast": {"enabled": "yes"}}}')
    assert "kwargs_handlers.autocast.enabled" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, accel.AccelError)
    assert info.value.status == accel._core.ACCEL_ERR_INVALID_ARGUMENT
    assert info.value.status_name == "ACCEL_ERR_INVALID_ARGUMENT"

    # free_memory(): the accelerator forgets its objects (step back to 0); they can be prepared again.
    acc.free_memory()
    assert acc.step() == 0
    with tempfile.TemporaryDirectory() as d:
        acc.save_state(os.path.join(d, "empty"))
        assert not os.path.exists(os.path.join(d, "empty", "model.safetensors"))
    acc.clear()
    acc.prepare(model, opt, dl, sched)

    # Free the accelerator before its children: they stay usable.
    acc.close()
    del acc
    gc.collect()
    batch = dl.next_batch()
    out = model.forward(batch.inputs())
    assert out.shape == (4, 3)
    opt.step()
    for obj in (batch, out, sched, dl, opt, model, features, labels):
        obj.close()


def test_invalid_config_paths():
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        accel.Accelerator('{"gradient_accumulation_steps": "four"}')
    with pytest.raises(accel.InvalidArgumentError, match="widths"):
        accel.Model.from_json('{"type": "mlp", "widths": "no"}')


def test_closed_object_raises():
    model = accel.Model.from_json(MODEL)
    model.close()
    model.close()   # idempotent
    with pytest.raises(accel.FailedPreconditionError, match="Model: used after close"):
        model.num_parameters()


def test_with_blocks_and_accumulate_end_error():
    with accel.Accelerator() as acc:
        with pytest.raises(accel.FailedPreconditionError, match="accumulate"):
            acc.accumulate_end()
    with pytest.raises(accel.FailedPreconditionError):
        acc.step()


def test_tensor_conversions():
    t = accel.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.shape == (2, 2) and t.dtype() == accel.FLOAT32 and t.numel() == 4
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert accel.tensor([1, 2, 3]).dtype() == accel.INT64
    assert accel.tensor(array.array("d", [0.5]), shape=[]).item() == 0.5
    assert accel.tensor(bytearray(b"\x01\x02"), dtype=accel.UINT8).tolist() == [1, 2]
    with pytest.raises(accel.InvalidArgumentError, match="nbytes"):
        accel._core.Tensor.from_bytes(b"\x00" * 3, accel.FLOAT32, [1])
    with pytest.raises(accel.OutOfRangeError):
        t.size(5)


def test_numpy_and_dlpack():
    np = pytest.importorskip("numpy")
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = accel.tensor(a)
    assert t.shape == (3, 4)
    assert (t.numpy() == a).all()
    if hasattr(np, "from_dlpack"):
        shared = np.from_dlpack(t)
        assert (shared == a).all()
    back = accel.Tensor.from_dlpack(t)
    assert back.tolist() == a.tolist()


def test_state_dict_roundtrip():
    accel.set_seed(1)
    m1 = accel.Model.from_json(MODEL)
    accel.set_seed(2)
    m2 = accel.Model.from_json(MODEL)
    sd = m1.state_dict()
    assert list(sd) == m1.parameter_names()
    m2.load_state_dict(sd)
    assert m2.state_dict()["0.weight" if "0.weight" in sd else list(sd)[0]].tolist() == \
        sd["0.weight" if "0.weight" in sd else list(sd)[0]].tolist()


def test_gil_released_during_compute():
    """Another Python thread runs *during* one long library call. Were the GIL held for the call, the
    ticker could take no time stamp between the call's start and end."""
    model = accel.Model.from_json('{"type": "mlp", "widths": [256, 1024, 1024, 4]}')
    x = accel.tensor(array.array("f", [0.1] * (2048 * 256)), shape=[2048, 256])
    stamps = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            stamps.append(time.perf_counter())

    th = threading.Thread(target=ticker)
    th.start()
    try:
        while not stamps:
            time.sleep(0.001)
        start = time.perf_counter()
        model.forward(x).close()
        end = time.perf_counter()
    finally:
        stop.set()
        th.join()
    margin = 0.1 * (end - start)
    inside = [t for t in stamps if start + margin < t < end - margin]
    assert inside, "no tick during a %.3f s forward: the GIL was held" % (end - start)


def test_collectives_single_process():
    """One process: every collective returns its input; the scoped forms and process facts work."""
    acc = accel.Accelerator()
    t = accel.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert acc.gather(t).tolist() == t.tolist()
    assert acc.gather_for_metrics(t).tolist() == t.tolist()
    for reduction in ("sum", "mean", "max", "min", "none"):
        assert acc.reduce(t, reduction).tolist() == t.tolist()
    assert acc.reduce(t).tolist() == t.tolist()
    with pytest.raises(accel.InvalidArgumentError, match="reduction"):
        acc.reduce(t, "product")
    acc.broadcast(t, 0)
    assert t.tolist() == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    with pytest.raises(accel.OutOfRangeError):
        acc.broadcast(t, 1)
    assert acc.pad_across_processes(t, dim=0, pad_index=-1.0, pad_first=True).tolist() == t.tolist()
    assert acc.split_between_processes(t, apply_padding=True).tolist() == t.tolist()
    acc.wait_for_everyone()
    assert not acc.check_trigger()
    acc.set_trigger()
    assert acc.check_trigger() and not acc.check_trigger()
    with acc.main_process_first():
        with acc.local_main_process_first():
            pass
    with pytest.raises(accel.FailedPreconditionError):
        acc.main_process_first_end()
    assert acc.num_local_processes() == 1 and acc.is_last_process()

    # Accelerate's process decorators: one process is main, local main, last and process 0.
    calls = []

    @acc.on_main_process
    def on_main(x):
        calls.append(("main", x))
        return x

    @acc.on_process(process_index=1)
    def on_one():
        calls.append("one")

    assert on_main(3) == 3 and on_one() is None and on_main.__name__ == "on_main"
    acc.on_local_main_process(lambda: calls.append("local"))()
    acc.on_last_process(lambda: calls.append("last"))()
    acc.on_local_process(lambda: calls.append("local0"), local_process_index=0)()
    assert calls == [("main", 3), "local", "last", "local0"]
    with pytest.raises(ValueError, match="process_index"):
        acc.on_process(lambda: None)
    assert acc.distributed_backend() == "single"
    assert '"models"' in acc.ddp_stats_json()
    assert '"peak_rss_bytes"' in acc.memory_stats_json()
    assert acc.grad_scaler_growth_tracker() == 0
    assert (accel.process_local_index(), accel.process_local_count(), accel.process_is_local_main()) == (0, 1, True)
    features, labels = make_data(10)
    dl = accel.DataLoader(features, labels, '{"batch_size": 4}')
    assert [b.indices().tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    acc.close()


def test_trackers():
    import json
    with tempfile.TemporaryDirectory() as d:
        acc = accel.Accelerator('{"log_with": ["jsonl", "tensorboard"], "project_config": {"logging_dir": "%s"}}' % d)
        acc.init_trackers("exp", '{"lr": 0.1}', '{"tensorboard": {"flush_secs": 1}}')
        acc.log('{"loss": 0.5}', 3)
        acc.log('{"loss": 0.25}')
        info = json.loads(acc.get_tracker_json("tensorboard"))
        assert info["main_process"] and info["files"], info
        acc.end_training()
        with open(os.path.join(d, "exp", "metrics.jsonl")) as fh:
            lines = [json.loads(line) for line in fh]
        assert lines[0]["config"] == {"lr": 0.1}, lines
        assert [(l["step"], l["values"]["loss"]) for l in lines[1:]] == [(3, 0.5), (None, 0.25)], lines
        with pytest.raises(accel.InvalidArgumentError):
            acc.log("[1]", 0)


def test_checkpoint_options_blobs_and_save_model():
    with tempfile.TemporaryDirectory() as d:
        project = os.path.join(d, "proj")
        acc = accel.Accelerator(
            '{"project_config": {"project_dir": "%s", "automatic_checkpoint_naming": true}}' % project)
        model = accel.Model.from_json(MODEL)
        opt = accel.Optimizer(model, '{"type": "sgd", "lr": 0.1}')
        acc.prepare(model, opt)
        assert acc.register_bytes_for_checkpointing(b"first") == 0
        assert acc.register_bytes_for_checkpointing(array.array("B", [1, 2, 3])) == 1
        assert acc.project_iteration() == 0
        assert acc.load_latest_state() is False   # automatic resume: a fresh start loads nothing
        first = acc.save_state(None, '{"safe_serialization": false}')   # automatic naming
        assert first == os.path.join(project, "checkpoints", "checkpoint_0")
        assert os.path.isfile(os.path.join(first, "pytorch_model.bin"))
        assert acc.project_iteration() == 1
        assert acc.get_checkpointing_bytes(0) == b"first" and acc.get_checkpointing_bytes(1) == b"\x01\x02\x03"
        with pytest.raises(accel.OutOfRangeError, match="index"):
            acc.get_checkpointing_bytes(2)
        with pytest.raises(accel.InvalidArgumentError, match="safe_serialization"):
            acc.save_state(None, '{"safe_serialization": "yes"}')
        assert acc.load_state(None, '{"strict": true}') == first   # the newest automatic checkpoint
        assert acc.load_latest_state() is True and acc.project_iteration() == 1
        assert acc.get_checkpointing_bytes(0) == b"first"

        exported = os.path.join(d, "export")
        acc.save_model(model, exported, '{"max_shard_size": 200}')
        assert os.path.isfile(os.path.join(exported, "model.safetensors.index.json"))
        accel.set_seed(5)
        other = accel.Model.from_json(MODEL)
        first_key = model.state_dict_key(0)
        assert other.get_tensor(first_key).tolist() != model.get_tensor(first_key).tolist()
        other.load_checkpoint(exported, '{"strict": true}')
        for i in range(model.state_dict_size()):
            key = model.state_dict_key(i)
            assert other.get_tensor(key).tolist() == model.get_tensor(key).tolist()
        # The shards merged into one pytorch_model.bin (merge_fsdp_weights) load the same weights.
        merged = accel.merge_weights(exported, os.path.join(d, "merged"), '{"safe_serialization": false}')
        assert merged == os.path.join(d, "merged", "pytorch_model.bin")
        other.load_checkpoint(merged, '{"strict": true}')
        assert other.get_tensor(first_key).tolist() == model.get_tensor(first_key).tolist()
        with pytest.raises(accel.NotFoundError):
            accel.merge_weights(os.path.join(d, "missing"), os.path.join(d, "merged"))
        with pytest.raises(accel.NotFoundError):
            other.load_checkpoint(os.path.join(d, "missing"))
        acc.close()


def test_tracker_callback():
    """A tracker written in Python (Accelerate's GeneralTracker): told init, log and finish; an exception
    in it fails the accel call with its text; a returned status fails it naming the tracker."""
    events = []

    class Recorder(accel.TrackerCallback):
        def on_event(self, event, json_text, step):
            events.append((event, json.loads(json_text), step))
            return 0

    acc = accel.Accelerator()
    acc.add_tracker("recorder", Recorder())  # the test keeps no reference: the accelerator does
    gc.collect()
    acc.init_trackers("run", '{"lr": 0.1}')
    acc.log('{"loss": 0.5}', 3)
    acc.end_training()
    assert events == [
        (accel.TRACKER_EVENT_INIT, {"project_name": "run", "config": {"lr": 0.1}, "init_kwargs": {}}, -1),
        (accel.TRACKER_EVENT_LOG, {"loss": 0.5}, 3),
        (accel.TRACKER_EVENT_FINISH, {}, -1),
    ]

    class Failing(accel.TrackerCallback):
        def on_event(self, event, json_text, step):
            if event == accel.TRACKER_EVENT_LOG:
                raise RuntimeError("the metrics service is down")
            return 0

    class Refusing(accel.TrackerCallback):
        def on_event(self, event, json_text, step):
            return accel._core.ACCEL_ERR_UNAVAILABLE if event == accel.TRACKER_EVENT_LOG else 0

    for tracker, error, text in ((Failing(), accel.AccelError, "the metrics service is down"),
                                 (Refusing(), accel.UnavailableError, "refusing")):
        acc = accel.Accelerator()
        acc.add_tracker("refusing" if isinstance(tracker, Refusing) else "failing", tracker)
        acc.init_trackers("run")
        with pytest.raises(error, match=text):
            acc.log('{"x": 1}', 0)
        acc.end_training()
    with pytest.raises(accel.InvalidArgumentError, match="callback"):
        accel.Accelerator().add_tracker("none", None)
