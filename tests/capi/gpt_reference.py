"""Reference for accel's "gpt" model, written with Python's torch only (no transformers).

  gpt_reference.py write DIR   writes DIR/model.safetensors in the exact layout Hugging Face's
                               GPT2LMHeadModel.save_pretrained writes (keys "transformer.*", GPT-2's
                               Conv1D weights [in, out], no lm_head.weight since it is tied, F32),
                               DIR/config.json, DIR/input_ids.bin (int64 [2, n_positions]) and
                               DIR/logits.bin (float32 [2, n_positions, vocab_size], little-endian, raw)
                               computed below from the GPT-2 equations (in float64).
  gpt_reference.py check DIR   checks that DIR/model.safetensors (accel's save_model output) holds
                               exactly the keys, shapes, dtypes and values `write` produced, and that
                               DIR/config.json is GPT2LMHeadModel's with CONFIG's values.

The recipe (so the file can be rebuilt by anyone): CONFIG below; torch.manual_seed(SEED); then, in
HF's state-dict order, each tensor is drawn with torch.randn(shape, dtype=float32) and scaled:
layer-norm weights 1 + 0.1 r, every bias 0.1 r, wte/wpe 0.5 r, other weights 0.2 r.

The equations (GPT-2, Radford et al. 2019, as modeling_gpt2.py computes them):
  h = wte[ids] + wpe[0..T-1]
  per block:  x = LN(h; ln_1);  q, k, v = split(x c_attn.W + c_attn.b) into n_head heads of size d
              A = softmax(q k^T / sqrt(d), masked where key position > query position)
              h = h + (merge(A v) c_proj.W + c_proj.b)
              x = LN(h; ln_2);  h = h + gelu_new(x c_fc.W + c_fc.b) mlp.c_proj.W + mlp.c_proj.b
  logits = LN(h; ln_f) wte^T
  LN(x) = (x - mean) / sqrt(var + eps) * w + b   (biased variance over the last dimension)
  gelu_new(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import safetensors_io  # noqa: E402

CONFIG = {"vocab_size": 61, "n_positions": 16, "n_embd": 32, "n_layer": 2, "n_head": 4,
          "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5}
SEED = 20241123


def layout(c):
    e, v, p = c["n_embd"], c["vocab_size"], c["n_positions"]
    out = [("transformer.wte.weight", [v, e]), ("transformer.wpe.weight", [p, e])]
    for i in range(c["n_layer"]):
        h = f"transformer.h.{i}."
        out += [(h + "ln_1.weight", [e]), (h + "ln_1.bias", [e]),
                (h + "attn.c_attn.weight", [e, 3 * e]), (h + "attn.c_attn.bias", [3 * e]),
                (h + "attn.c_proj.weight", [e, e]), (h + "attn.c_proj.bias", [e]),
                (h + "ln_2.weight", [e]), (h + "ln_2.bias", [e]),
                (h + "mlp.c_fc.weight", [e, 4 * e]), (h + "mlp.c_fc.bias", [4 * e]),
                (h + "mlp.c_proj.weight", [4 * e, e]), (h + "mlp.c_proj.bias", [e])]
    return out + [("transformer.ln_f.weight", [e]), ("transformer.ln_f.bias", [e])]


def weights():
    torch.manual_seed(SEED)
    out = {}
    for name, shape in layout(CONFIG):
        r = torch.randn(shape, dtype=torch.float32)
        if ".ln_" in name and name.endswith(".weight"):
            t = 1 + 0.1 * r
        elif name.endswith(".bias"):
            t = 0.1 * r
        elif name in ("transformer.wte.weight", "transformer.wpe.weight"):
            t = 0.5 * r
        else:
            t = 0.2 * r
        out[name] = t
    return out


def logits(w, ids, adapter=None):
    """`adapter(x, module)` (optional): a term added to each Conv1D layer's output, e.g. LoRA's update
    (tests/python/lora_reference.py); x is float64."""
    c = CONFIG
    w = {k: v.double() for k, v in w.items()}

    def conv1d(x, p):
        y = x @ w[p + ".weight"] + w[p + ".bias"]
        return y if adapter is None else y + adapter(x, p)
    n, hd = c["n_head"], c["n_embd"] // c["n_head"]
    eps = c["layer_norm_epsilon"]

    def ln(x, p):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + eps) * w[p + ".weight"] + w[p + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    B, T = ids.shape
    h = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        x = ln(h, p + "ln_1")
        qkv = conv1d(x, p + "attn.c_attn")
        q, k, v = (t.reshape(B, T, n, hd).transpose(1, 2) for t in qkv.split(c["n_embd"], -1))
        s = q @ k.transpose(-1, -2) / math.sqrt(hd)
        future = torch.arange(T)[None, :] > torch.arange(T)[:, None]
        s = s.masked_fill(future, float("-inf"))
        a = torch.exp(s - s.max(-1, keepdim=True).values)
        a = a / a.sum(-1, keepdim=True)
        y = (a @ v).transpose(1, 2).reshape(B, T, c["n_embd"])
        h = h + conv1d(y, p + "attn.c_proj")
        x = ln(h, p + "ln_2")
        h = h + conv1d(gelu_new(conv1d(x, p + "mlp.c_fc")), p + "mlp.c_proj")
    return ln(h, "transformer.ln_f") @ w["transformer.wte.weight"].T


def main():
    mode, d = sys.argv[1], sys.argv[2]
    w = weights()
    if mode == "write":
        safetensors_io.write(f"{d}/model.safetensors", w)
        with open(f"{d}/config.json", "w") as f:
            json.dump(dict(CONFIG, model_type="gpt2", architectures=["GPT2LMHeadModel"]), f)
        g = torch.Generator().manual_seed(SEED + 1)
        ids = torch.randint(0, CONFIG["vocab_size"], (2, CONFIG["n_positions"]), generator=g)
        with open(f"{d}/input_ids.bin", "wb") as f:
            f.write(ids.numpy().astype("<i8").tobytes())
        with open(f"{d}/logits.bin", "wb") as f:
            f.write(logits(w, ids).float().numpy().astype("<f4").tobytes())
    elif mode == "check":
        got = safetensors_io.read_with_dtypes(f"{d}/model.safetensors")
        want = layout(CONFIG)
        assert sorted(got) == sorted(n for n, _ in want), f"keys differ: {sorted(set(got) ^ set(n for n, _ in want))}"
        for name, shape in want:
            dtype, t = got[name]
            assert dtype == "F32", (name, dtype)
            assert list(t.shape) == shape, (name, list(t.shape), shape)
            assert torch.equal(t, w[name]), name
        with open(f"{d}/config.json") as f:
            config = json.load(f)
        assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"], config
        for k, v in CONFIG.items():
            assert config[k] == v, (k, config[k], v)
        print(f"gpt_reference: {len(want)} tensors in GPT2LMHeadModel's layout, config.json as transformers reads it")
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
