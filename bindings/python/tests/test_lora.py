"""LoRA through the Python binding against the hand-written reference (tests/python/lora_reference.py on Debian's
python3-torch): a gpt with adapters computes the logits and the adapters' gradients of the GPT-2 equations
(tests/capi/gpt_reference.py) plus LoRA's update; the base weights get no gradient."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

import accel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "capi"))
import gpt_reference  # noqa: E402
import lora_reference  # noqa: E402

LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["c_attn", "c_proj", "c_fc"]}


def gpt_spec(lora):
    c = dict(gpt_reference.CONFIG, type="gpt", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, lora=lora)
    import json
    return json.dumps(c)


def to_torch(t):
    return torch.from_numpy(t.numpy().copy())


def test_gpt_lora_forward_and_backward_equal_the_reference():
    weights = gpt_reference.weights()
    with accel.Accelerator("{}") as acc, accel.Model.from_json(gpt_spec(LORA)) as model:
        names = model.parameter_names()
        adapters = [n for n in names if ".lora_" in n]
        assert len(adapters) == 2 * 4 * gpt_reference.CONFIG["n_layer"]  # c_attn, attn.c_proj, c_fc, mlp.c_proj
        g = torch.Generator().manual_seed(5)
        state = dict(weights)
        for n in adapters:  # B random too: PEFT's B = 0 would hide the update
            state[n] = torch.randn(tuple(model.get_tensor(n).shape), generator=g) * 0.3
        model.load_state_dict({k: v.numpy() for k, v in state.items()})
        ids = torch.randint(0, gpt_reference.CONFIG["vocab_size"], (2, gpt_reference.CONFIG["n_positions"]), generator=g)
        ref = lora_reference.Adapters(state, LORA)
        want = gpt_reference.logits(weights, ids, ref)
        x = accel.tensor(ids.numpy())
        with model.forward(x) as logits, accel.compute_loss("causal_lm", logits, x) as loss:
            got = to_torch(logits)
            assert torch.allclose(got.double(), want, rtol=1e-4, atol=1e-4), (got.double() - want).abs().max()
            acc.backward(loss)
        v = want.shape[-1]
        # causal_lm takes labels already shifted: the ids themselves serve as labels here
        torch.nn.functional.cross_entropy(want.reshape(-1, v), ids.reshape(-1)).backward()
        for n in adapters:
            grad = model.get_gradient(n)
            assert grad is not None, n
            assert torch.allclose(to_torch(grad).double(), ref.t[n].grad, rtol=1e-3, atol=1e-5), n
        for n in names:
            if ".lora_" not in n:
                assert model.get_gradient(n) is None, n + " is frozen but has a gradient"
