"""find_executable_batch_size as Accelerate's decorator (the C-level checks: tests/capi/test_memory.c): a step
failing above a size lands on the largest of the sequence that fits, with either factor; the function's own
exception propagates unchanged; reaching zero; a real forward pass under max_memory_bytes."""

import pytest

import accel


def fails_above(fits, tried, error=lambda: accel.ResourceExhaustedError("out of memory (a test's step)", 8)):
    def step(batch_size, tag):
        tried.append(batch_size)
        if batch_size > fits:
            raise error()
        return (tag, batch_size)

    return step


def test_halves_to_the_largest_size_that_fits():
    tried = []
    train = accel.find_executable_batch_size(fails_above(37, tried), starting_batch_size=128)
    assert train("run") == ("run", 32)
    assert tried == [128, 64, 32]
    # As Accelerate's decorator: a later call starts from the size found.
    assert train("again") == ("again", 32)
    assert tried == [128, 64, 32, 32]


def test_factor_09_and_python_out_of_memory():
    tried = []

    @accel.find_executable_batch_size(starting_batch_size=128, reduce_batch_size_factor=0.9)
    def train(batch_size, tag):
        tried.append(batch_size)
        if batch_size > 37:
            raise MemoryError()
        return batch_size

    assert train("x") == 36
    assert tried == [128, 115, 103, 92, 82, 73, 65, 58, 52, 46, 41, 36]


def test_torch_style_message_is_out_of_memory():
    tried = []
    step = fails_above(10, tried, lambda: RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert accel.find_executable_batch_size(step, starting_batch_size=40)("t") == ("t", 10)
    assert tried == [40, 20, 10]


def test_other_exceptions_propagate_unchanged():
    class Mine(Exception):
        pass

    tried = []

    @accel.find_executable_batch_size(starting_batch_size=64)
    def train(batch_size):
        tried.append(batch_size)
        if batch_size > 32:
            raise MemoryError()
        raise Mine("the data set is gone")

    with pytest.raises(Mine, match="the data set is gone"):
        train()
    assert tried == [64, 32]


def test_reached_zero_and_bad_options():
    tried = []
    with pytest.raises(accel.ResourceExhaustedError, match="reached zero"):
        accel.find_executable_batch_size(fails_above(0, tried), starting_batch_size=4)("t")
    assert tried == [4, 2, 1]
    with pytest.raises(accel.InvalidArgumentError, match="reduce_batch_size_factor"):
        accel.find_executable_batch_size(lambda b: None, reduce_batch_size_factor=1.5)()


def test_forward_under_a_memory_budget():
    model = accel.Model.from_json('{"type": "mlp", "widths": [256, 1024, 4]}')
    seen = []

    @accel.find_executable_batch_size(starting_batch_size=1024, max_memory_bytes="4MB")
    def forward(batch_size):
        x = accel.Tensor.from_bytes(bytes(batch_size * 256 * 4), accel.FLOAT32, [batch_size, 256])
        try:
            model.forward(x)
        except accel.AccelError as e:
            seen.append((batch_size, e.status_name))
            raise
        seen.append((batch_size, "ok"))
        return batch_size

    assert forward() == 256
    assert seen == [(1024, "ACCEL_ERR_RESOURCE_EXHAUSTED"), (512, "ACCEL_ERR_RESOURCE_EXHAUSTED"), (256, "ok")]
