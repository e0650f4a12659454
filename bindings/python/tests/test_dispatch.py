"""Model.dispatch / load_checkpoint_and_dispatch (the C-level checks: tests/capi/test_dispatch.c): a llama with every
module on disk generates what it generated in memory; what a dispatched model cannot do raises."""

import pytest

import accel

SPEC = ('{"type": "llama", "vocab_size": 50, "hidden_size": 16, "intermediate_size": 24, "num_hidden_layers": 2,'
        ' "num_attention_heads": 2, "initializer_range": 0.3}')


def test_disk_offload_generates_the_same_tokens(tmp_path):
    model = accel.Model.from_json(SPEC)
    prompt = accel.tensor([3, 1, 4, 1, 5])
    want = model.generate(prompt, '{"max_new_tokens": 6}').tolist()
    model.dispatch('{"": "disk"}', '{"offload_dir": "%s"}' % (tmp_path / "offload"))
    assert (tmp_path / "offload" / "index.json").exists()
    assert model.generate(prompt, '{"max_new_tokens": 6}').tolist() == want
    with pytest.raises(accel.FailedPreconditionError, match="already dispatched"):
        model.dispatch('{"": "disk"}', '{"offload_dir": "%s"}' % (tmp_path / "offload"))
    other = accel.Model.from_json(SPEC)
    with pytest.raises(accel.InvalidArgumentError, match="offload_dir"):
        other.dispatch('{"": "disk"}')
    with pytest.raises(accel.InvalidArgumentError, match="device_map"):
        other.load_checkpoint_and_dispatch(str(tmp_path / "none.safetensors"), '{"device_map": "fastest"}')
