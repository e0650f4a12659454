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


def test_adapter_and_merged_folders_as_peft_writes_them(tmp_path):
    """save_pretrained's adapter_only folder read without accel (PEFT's keys, values, adapter_config.json); its merge
    folder holds W + s B A (Conv1D: transposed) and loads back, through from_pretrained, as a model computing what the
    adapted one computes; from_pretrained with a "lora" option loads a base folder strictly and adds new adapters."""
    import json
    import llama_reference
    with accel.Model.from_json(gpt_spec(LORA)) as model:
        names = model.parameter_names()
        g = torch.Generator().manual_seed(7)
        model.load_state_dict({n: (torch.randn(tuple(model.get_tensor(n).shape), generator=g) * 0.3).numpy()
                               for n in names if ".lora_B." in n}, strict=False)
        adapter_dir, merged_dir = str(tmp_path / "adapter"), str(tmp_path / "merged")
        model.save_pretrained(adapter_dir, '{"adapter_only": true}')
        tensors, cfg = lora_reference.read_adapter(adapter_dir)
        modules = sorted({n[: -len(".lora_A.weight")] for n in names if n.endswith(".lora_A.weight")})
        assert sorted(tensors) == lora_reference.peft_keys(modules)
        for k, t in tensors.items():
            assert torch.equal(t, to_torch(model.get_tensor(k[len(lora_reference.PREFIX):]))), k
        assert (cfg["peft_type"], cfg["task_type"], cfg["r"], cfg["lora_alpha"], cfg["bias"]) == \
            ("LORA", "CAUSAL_LM", 4, 8, "none")
        assert cfg["target_modules"] == LORA["target_modules"] and cfg["fan_in_fan_out"] is True
        model.save_pretrained(merged_dir, '{"merge": true}')
        merged = llama_reference.read_folder(merged_dir)
        state = {n: to_torch(model.get_tensor(n)) for n in names}
        want = lora_reference.merge(state, lora_reference.Adapters(state, LORA), fan_in_fan_out=True)
        assert sorted(merged) == sorted(want)
        for k in want:
            assert torch.allclose(merged[k], want[k], atol=1e-6), k
        ids = accel.tensor(torch.randint(0, 61, (2, 16), generator=g).numpy())
        with model.forward_no_grad(ids) as a, accel.Model.from_pretrained(merged_dir) as plain, \
                plain.forward_no_grad(ids) as b:
            assert torch.allclose(to_torch(a), to_torch(b), atol=1e-5)
        with accel.Model.from_pretrained(merged_dir, json.dumps({"lora": LORA})) as fresh:
            assert fresh.parameter_names() == names
            assert not to_torch(fresh.get_tensor(modules[0] + ".lora_B.weight")).any()


def test_llama_lora_forward_and_backward_equal_the_reference():
    """GQA llama with adapters on PEFT's default targets (q_proj, v_proj) and on down_proj, rank-stabilised
    scaling: logits and adapter gradients equal tests/python/llama_reference.py's model with LoRA on those layers."""
    import json
    import llama_reference
    config = {"type": "llama", "vocab_size": 53, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 32,
              "attention_bias": True}
    lora = {"r": 4, "lora_alpha": 6, "use_rslora": True, "target_modules": ["q_proj", "v_proj", "down_proj"]}
    weights = llama_reference.random_weights(config, 3)
    with accel.Accelerator("{}") as acc, accel.Model.from_json(json.dumps(dict(config, lora=lora))) as model:
        names = model.parameter_names()
        adapters = [n for n in names if ".lora_" in n]
        assert len(adapters) == 2 * 3 * 2
        g = torch.Generator().manual_seed(9)
        state = dict(weights)
        for n in adapters:
            state[n] = torch.randn(tuple(model.get_tensor(n).shape), generator=g) * 0.3
        model.load_state_dict({k: v.numpy() for k, v in state.items()})
        ids = torch.randint(0, 53, (2, 12), generator=g)
        ref = lora_reference.Adapters(state, lora)
        want = lora_reference.LoraLlama(config, weights, ref).forward(ids)
        x = accel.tensor(ids.numpy())
        with model.forward(x) as logits, accel.compute_loss("causal_lm", logits, x) as loss:
            got = to_torch(logits)
            assert torch.allclose(got, want.detach(), rtol=1e-4, atol=1e-4), (got - want).abs().max()
            acc.backward(loss)
        torch.nn.functional.cross_entropy(want.reshape(-1, 53).double(), ids.reshape(-1)).backward()
        for n in adapters:
            assert torch.allclose(to_torch(model.get_gradient(n)).double(), ref.t[n].grad, rtol=1e-3, atol=1e-5), n
        assert all(model.get_gradient(n) is None for n in names if ".lora_" not in n)


def test_save_state_and_save_model_keep_the_adapters(tmp_path):
    """save_state / load_state resume a LoRA model and its optimizer bit for bit; save_model writes the base and the
    adapters under accel's names (config.json stays the base model's)."""
    import llama_reference
    with accel.Accelerator("{}") as acc, accel.Model.from_json(gpt_spec(LORA)) as model, \
            accel.Optimizer(model, '{"type": "adamw", "lr": 0.01}') as opt:
        acc.prepare(model, opt)
        x = accel.tensor(torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(1)).numpy())

        def step():
            with model.forward(x) as out, accel.compute_loss("causal_lm", out, x) as loss:
                acc.backward(loss)
            opt.step()
            opt.zero_grad()

        names = model.parameter_names()
        base = {n: to_torch(model.get_tensor(n)) for n in names if ".lora_" not in n}
        step()
        acc.save_state(str(tmp_path / "state"))
        step()
        after = {n: to_torch(model.get_tensor(n)) for n in names}
        step()
        acc.load_state(str(tmp_path / "state"))
        step()
        for n in names:
            assert torch.equal(to_torch(model.get_tensor(n)), after[n]), n
            if n in base:
                assert torch.equal(after[n], base[n]), n + " is frozen but changed"
        acc.save_model(model, str(tmp_path / "model"))
        assert sorted(llama_reference.read_folder(str(tmp_path / "model"))) == sorted(names)
