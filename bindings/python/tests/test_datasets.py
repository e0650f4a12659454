"""Datasets from Python code (issue 35): map-style objects and iterables give a tensor loader's batches,
workers give the same batches and overlap a slow dataset, the "pad" and a Python collate, an exception in
a callback fails the loop with its message (from worker threads too), and an iterable with state resumes
exactly through save_state / load_state."""

import array
import json
import os
import tempfile
import time

import pytest

import accel

N = 22


def rows(n=N):
    x = array.array("f", [v for i in range(n) for v in (float(i), float(-i))])
    y = array.array("q", [100 + i for i in range(n)])
    return accel.tensor(x, shape=[n, 2]), accel.tensor(y, shape=[n])


class Rows:
    """Map-style: sample i = ([i, -i], 100 + i)."""

    def __init__(self, n=N, sleep=0.0, fail_at=-1):
        self.n, self.sleep, self.fail_at = n, sleep, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep:
            time.sleep(self.sleep)
        if i == self.fail_at:
            raise KeyError("row %d is missing from the table" % i)
        return [float(i), float(-i)], accel.tensor(array.array("q", [100 + i]), shape=[])


class Stream:
    """Iterable: the same rows in order, with torchdata's state_dict / load_state_dict."""

    def __init__(self, n=N):
        self.n, self.pos, self.epochs = n, 0, []

    def set_epoch(self, epoch):
        self.epochs.append(epoch)
        self.pos = 0

    def __iter__(self):
        while self.pos < self.n:
            i = self.pos
            self.pos += 1
            yield [float(i), float(-i)], accel.tensor(array.array("q", [100 + i]), shape=[])

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, d):
        self.pos = d["pos"]


def batches(dl):
    out = []
    for b in dl:
        out.append((b.inputs().tolist(), b.labels().tolist()))
    return out


@pytest.mark.parametrize("config", ['{"batch_size": 4}', '{"batch_size": 5, "drop_last": true}',
                                    '{"batch_size": 3, "shuffle": true, "seed": 7}'])
def test_map_dataset_equals_tensor_loader(config):
    want = batches(accel.DataLoader(*rows(), config))
    dl = accel.DataLoader.from_dataset(Rows(), config)
    assert len(dl) == len(want)
    assert batches(dl) == want


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_equals_tensor_loader(workers):
    want = batches(accel.DataLoader(*rows(), '{"batch_size": 4}'))
    stream = Stream()
    dl = accel.DataLoader.from_dataset(stream, '{"batch_size": 4, "num_workers": %d}' % workers)
    assert batches(dl) == want
    assert batches(dl) == want
    assert stream.epochs == [0, 1]
    with pytest.raises(accel.FailedPreconditionError, match="no length"):
        len(dl)


def test_workers_same_batches_and_faster():
    config = '{"batch_size": 3, "shuffle": true, "seed": 11, "num_workers": %d}'
    want = batches(accel.DataLoader.from_dataset(Rows(), config % 0))
    for w in (2, 4):
        assert batches(accel.DataLoader.from_dataset(Rows(sleep=0.001), config % w)) == want
    seconds = []
    for w in (0, 4):
        dl = accel.DataLoader.from_dataset(Rows(sleep=0.002), '{"batch_size": 2, "num_workers": %d}' % w)
        t0 = time.perf_counter()
        for _ in range(4):
            batches(dl)
        seconds.append(time.perf_counter() - t0)
    print("python slow dataset: 0 workers %.3f s, 4 workers %.3f s (x%.2f)" % (seconds[0], seconds[1], seconds[0] / seconds[1]))
    assert seconds[0] >= 3.0 * seconds[1]


@pytest.mark.parametrize("workers", [0, 2])
def test_exception_in_get_fails_the_loop(workers):
    dl = accel.DataLoader.from_dataset(Rows(fail_at=7), '{"batch_size": 4, "num_workers": %d}' % workers)
    assert dl.next_batch() is not None
    with pytest.raises(accel.AccelError, match="row 7 is missing from the table"):
        dl.next_batch()


def test_pad_and_python_collate():
    seqs = [[10 * i + k + 1 for k in range(i % 4 + 2)] for i in range(6)]
    dl = accel.DataLoader.from_dataset(seqs, '{"batch_size": 2, "collate": "pad", "causal_lm": true}')
    b = dl.next_batch()
    assert b.inputs().tolist() == [[1, 0], [11, 12]]
    assert b.labels().tolist() == [[2, -100], [12, 13]]
    assert b.attention_mask().tolist() == [[1, 0], [1, 1]]
    with pytest.raises(accel.InvalidArgumentError, match="sample 1's inputs have shape"):
        accel.DataLoader.from_dataset(seqs, '{"batch_size": 2}').next_batch()

    def total(samples):
        return [[sum(s[0].tolist())] for s in samples], [s[1].tolist() for s in samples]

    b = accel.DataLoader.from_dataset(Rows(), '{"batch_size": 3}', collate=total).next_batch()
    assert b.inputs().tolist() == [[0.0], [0.0], [0.0]]
    assert b.labels().tolist() == [100, 101, 102]

    def broken(samples):
        raise RuntimeError("collate cannot")

    with pytest.raises(accel.AccelError, match="collate cannot"):
        accel.DataLoader.from_dataset(Rows(), '{"batch_size": 3}', collate=broken).next_batch()


@pytest.mark.parametrize("workers", [0, 1])
def test_iterable_resume(workers):
    config = '{"batch_size": 3, "num_workers": %d}' % workers  # 1: a thread reads ahead, the state stays exact
    with tempfile.TemporaryDirectory() as tmp:
        acc = accel.Accelerator()
        dl = accel.DataLoader.from_dataset(Stream(), config)
        acc.prepare_dataloader(dl)
        batches(dl)
        for _ in range(2):
            dl.next_batch()
        acc.save_state(os.path.join(tmp, "ckpt"))
        rest = batches(dl)
        acc2 = accel.Accelerator()
        stream = Stream()
        dl2 = accel.DataLoader.from_dataset(stream, config)
        acc2.prepare_dataloader(dl2)
        acc2.load_state(os.path.join(tmp, "ckpt"))
        assert batches(dl2) == rest
        assert stream.epochs == [1]


def test_packing():
    """Documents as lists, packed with an EOS into windows of 4 + 1 tokens; the short last one padded."""

    class Docs:
        def __iter__(self):
            return iter([[1, 2, 3], [10, 11, 12, 13, 14, 15], [20, 21]])

    dl = accel.DataLoader.from_dataset(Docs(), json.dumps({"batch_size": 2, "packing": {"block_size": 4, "eos_token_id": 0}}))
    got = []
    for b in dl:
        got.append((b.inputs().tolist(), b.labels().tolist()))
    # The stream 1 2 3 0 10 11 12 13 14 15 0 20 21 0, windows 4 apart.
    assert got == [([[1, 2, 3, 0], [10, 11, 12, 13]], [[2, 3, 0, 10], [11, 12, 13, 14]]),
                   ([[14, 15, 0, 20], [21, 0, 0, 0]], [[15, 0, 20, 21], [0, -100, -100, -100]])]
    with pytest.raises(Exception, match="packing: needs an iterable dataset"):
        accel.DataLoader.from_dataset([[1, 2]], json.dumps({"packing": {"block_size": 4}}))
