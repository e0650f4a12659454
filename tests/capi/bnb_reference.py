"""A reference of bitsandbytes' quantized formats written from ../shared/spec/precision-and-quantization.md
sections 3-4 (bitsandbytes itself is not in Debian): it quantizes the float weights accel saved and checks, bit for
bit, what accel's accel_model_quantize saved for the same model: NF4 with double quantization, FP4, and LLM.int8's
rows (weight, absmax, quant_map, nested_absmax, nested_quant_map, the quant_state JSON, SCB). Run by
capi_test_quantize reference. Usage: bnb_reference.py DIR (DIR/{float,nf4,fp4,int8}/model.safetensors).

Pre-quantized folders (capi_test_quantize prequantized):
  bnb_reference.py prequantized DIR   writes DIR/{nf4,fp4,int8}: a small llama's Hugging Face folder as transformers
      saves a bitsandbytes-quantized model (config.json with quantization_config; the quant_state JSON unpadded, as
      json.dumps writes it; weight_format beside int8 weights), with ids.i64 and logits.f32: the logits of the
      dequantized weights (tests/python/llama_reference.py); and DIR/bad_*: damaged copies of DIR/nf4 / DIR/int8.
  bnb_reference.py roundtrip DIR SAVED   checks that SAVED (accel's save_pretrained of DIR loaded) holds DIR's
      tensors bit for bit (the quant_state JSON compared as text without accel's trailing padding) and its
      quantization_config."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import llama_reference  # noqa: E402
import safetensors_io  # noqa: E402

NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453, -0.28444138169288635,
       -0.18477343022823334, -0.09105003625154495, 0.0, 0.07958029955625534, 0.16093020141124725,
       0.24611230194568634, 0.33791524171829224, 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
FP4_RAW = [0, 0.0625, 8, 12, 4, 6, 2, 3, -0.0, -0.0625, -8, -12, -4, -6, -2, -3]


def nearest(x, table):
    """Index into the ascending `table` of each x: how many midpoints x lies above (halfway: the lower entry)."""
    mids = (table[:-1] + table[1:]) * 0.5
    return (x.unsqueeze(-1) > mids).sum(-1)


def dynamic_map():
    """create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8)."""
    data = []
    for i in range(7):
        b = torch.linspace(0.1, 1, 2 ** i + 1)
        means = (b[:-1] + b[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist() + (-(10 ** (-6 + i)) * means).tolist()
    return torch.tensor(sorted(data + [0, 1.0]))


def blockwise(flat, blocksize):
    """Blocks of `blocksize` (the last one padded with zeros) and each block's absmax."""
    n = flat.numel()
    blocks = torch.nn.functional.pad(flat, (0, -n % blocksize)).view(-1, blocksize)
    return blocks, blocks.abs().max(1).values


def quantize_4bit(w, quant_type, double_quant):
    flat = w.float().flatten()
    n = flat.numel()
    blocks, absmax = blockwise(flat, 64)
    scaled = (blocks * (1.0 / absmax).unsqueeze(1)).clamp(-1, 1)
    scaled[absmax == 0] = 0.0
    if quant_type == "nf4":
        code = torch.tensor(NF4)
        idx = nearest(scaled, code)
    else:
        code = torch.tensor(FP4_RAW) / 12.0
        magnitudes = torch.tensor([0, 0.0625, 2, 3, 4, 6, 8, 12]) / 12.0
        index_of = torch.tensor([0, 1, 6, 7, 4, 5, 2, 3])
        idx = index_of[nearest(scaled.abs(), magnitudes)] + (scaled < 0).long() * 8
    idx = idx.flatten()[:n]
    if n % 2:
        idx = torch.cat([idx, nearest(torch.zeros(1), code) if quant_type == "nf4" else torch.zeros(1, dtype=torch.long)])
    packed = (idx[0::2] * 16 + idx[1::2]).to(torch.uint8).view(-1, 1)
    out = {"weight": packed, "weight.quant_map": code}
    meta = {"quant_type": quant_type, "blocksize": 64, "dtype": "float32", "shape": list(w.shape)}
    if not double_quant:
        out["weight.absmax"] = absmax
    else:
        offset = absmax.mean()
        dyn = dynamic_map()
        blocks2, absmax2 = blockwise(absmax - offset, 256)
        q = nearest((blocks2 * (1.0 / absmax2).unsqueeze(1)).clamp(-1, 1), dyn).flatten()[:absmax.numel()]
        out.update({"weight.absmax": q.to(torch.uint8), "weight.nested_absmax": absmax2, "weight.nested_quant_map": dyn})
        meta.update({"nested_blocksize": 256, "nested_dtype": "float32", "nested_offset": offset.item()})
    return out, meta


def quantize_int8(w):
    scb = w.float().abs().max(1).values
    return {"weight": torch.round(w.float() * (127.0 / scb).unsqueeze(1)).to(torch.int8), "SCB": scb}


def main(root):
    floats = safetensors_io.read(os.path.join(root, "float", "model.safetensors"))
    layers = sorted({k[: -len(".weight")] for k in floats if k.endswith(".weight")})[:-1]  # the last stays float
    problems, checked = [], 0
    for kind in ("nf4", "fp4", "int8"):
        got = safetensors_io.read(os.path.join(root, kind, "model.safetensors"))
        for layer in layers:
            w = floats[layer + ".weight"]
            if kind == "int8":
                want, meta = quantize_int8(w), None
            else:
                want, meta = quantize_4bit(w, kind, kind == "nf4")
                key = "%s.weight.quant_state.bitsandbytes__%s" % (layer, kind)
                stored = json.loads(bytes(got[key].tolist()).decode("utf-8"))
                if stored != meta:
                    problems.append("%s %s: quant_state %s, reference %s" % (kind, layer, stored, meta))
            for name, t in want.items():
                g = got.get(layer + "." + name)
                checked += 1
                if g is None or g.dtype != t.dtype or list(g.shape) != list(t.shape) or not torch.equal(g, t):
                    diff = "missing" if g is None else "%s %s vs %s %s" % (g.dtype, list(g.shape), t.dtype, list(t.shape))
                    if g is not None and g.shape == t.shape and g.dtype == t.dtype:
                        diff = "%d of %d elements differ" % (int((g != t).sum()), t.numel())
                    problems.append("%s %s.%s: %s" % (kind, layer, name, diff))
    for p in problems:
        print("bnb_reference: " + p)
    print("bnb_reference: %d tensors of %d layers compared, %d differ" % (checked, len(layers), len(problems)))
    return 1 if problems else 0


def dequantize_4bit(t, meta):
    """code[index] * absmax[block] (absmax = nested_code[q] * nested_absmax[block of 256] + offset)."""
    absmax = t["weight.absmax"]
    if "nested_offset" in meta:
        nested = t["weight.nested_quant_map"][absmax.long()]
        scale = t["weight.nested_absmax"].repeat_interleave(256)[: absmax.numel()]
        absmax = nested * scale + torch.tensor(meta["nested_offset"], dtype=torch.float32)
    packed = t["weight"].flatten().long()
    idx = torch.stack([packed // 16, packed % 16], 1).flatten()
    n = 1
    for d in meta["shape"]:
        n *= d
    v = t["weight.quant_map"][idx][:n]
    v = torch.nn.functional.pad(v, (0, -n % 64)).view(-1, 64) * absmax.view(-1, 1)
    return v.flatten()[:n].view(meta["shape"])


def int8_linear(x, cb, scb, threshold):
    """LLM.int8's matmul (spec section 3): input rows quantized to int8 by their absmax with the outlier columns (any
    |x| >= threshold) zeroed, an exact integer product dequantized by row x column statistics, plus the outlier
    columns in float against the dequantized weight's columns."""
    shape = x.shape
    x = x.reshape(-1, shape[-1]).float()
    outliers = x.abs() >= threshold
    cols = outliers.any(0).nonzero().flatten()
    x0 = x.masked_fill(outliers, 0.0)
    stats = x0.abs().max(1).values
    scale = torch.where(stats > 0, 127.0 / stats, torch.zeros_like(stats))
    q = torch.round(x0 * scale.unsqueeze(1))
    q[:, cols] = 0
    c = (q.double() @ cb.double().t()).float()  # exact: integers far below 2^53
    out = c * (stats.view(-1, 1) * scb.view(1, -1)) * 6.200124e-05
    if cols.numel():
        out = out + x[:, cols] @ (cb[:, cols].float() * scb.view(-1, 1) * 7.874015718698502e-3).t()
    return out.view(*shape[:-1], cb.shape[0])


class Int8Llama(llama_reference.Model):
    """The reference llama with its int8 layers computing as LLM.int8 does."""

    def __init__(self, config, weights, int8, threshold):
        super().__init__(config, weights)
        self.int8, self.threshold = int8, threshold

    def linear(self, x, name):
        if name not in self.int8:
            return super().linear(x, name)
        return int8_linear(x, *self.int8[name], self.threshold)


QUANTIZATION = {
    "nf4": {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True},
    "fp4": {"load_in_4bit": True, "bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": False},
    "int8": {"load_in_8bit": True},
}
LLAMA = {"model_type": "llama", "vocab_size": 96, "hidden_size": 64, "intermediate_size": 160, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def hf_quantization_config(kind):
    """transformers' BitsAndBytesConfig.to_dict() (llm_int8_skip_modules None: lm_head stays float by its rule)."""
    q = {"_load_in_4bit": False, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "float32",
         "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": "fp4", "bnb_4bit_use_double_quant": False,
         "llm_int8_enable_fp32_cpu_offload": False, "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": None,
         "llm_int8_threshold": 6.0, "load_in_4bit": False, "load_in_8bit": False, "quant_method": "bitsandbytes"}
    q.update(QUANTIZATION[kind])
    q["_load_in_4bit"], q["_load_in_8bit"] = q["load_in_4bit"], q["load_in_8bit"]
    return q


def write_hf_folder(d, config_json, tensors):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config_json, f, indent=2)
    safetensors_io.write(os.path.join(d, "model.safetensors"), tensors)


def prequantized(root):
    weights = llama_reference.random_weights(LLAMA, 5)
    ids = torch.tensor([[3, 17, 42, 8, 91, 0, 55, 23]], dtype=torch.long)
    for kind in QUANTIZATION:
        tensors, dequantized, int8 = {}, {}, {}
        for name, w in weights.items():
            layer = name[: -len(".weight")]
            if not (name.endswith("_proj.weight")):  # embeddings, norms and lm_head stay float
                tensors[name] = dequantized[name] = w
                continue
            if kind == "int8":
                q = quantize_int8(w)
                q["weight_format"] = torch.tensor(0, dtype=torch.uint8)
                dequantized[name] = w
                int8[layer] = (q["weight"], q["SCB"])
            else:
                q, meta = quantize_4bit(w, kind, QUANTIZATION[kind]["bnb_4bit_use_double_quant"])
                # bitsandbytes' pack_dict_to_tensor: json.dumps' bytes, as long as the text is.
                q["weight.quant_state.bitsandbytes__" + kind] = torch.tensor(list(json.dumps(meta).encode()),
                                                                             dtype=torch.uint8)
                dequantized[name] = dequantize_4bit(q, meta)
            tensors.update({layer + "." + k: v for k, v in q.items()})
        config_json = llama_reference.hf_config(LLAMA)
        config_json["quantization_config"] = hf_quantization_config(kind)
        d = os.path.join(root, kind)
        write_hf_folder(d, config_json, tensors)
        ids.numpy().tofile(os.path.join(d, "ids.i64"))
        model = Int8Llama(LLAMA, dequantized, int8, 6.0) if int8 else None
        llama_reference.logits(LLAMA, dequantized, ids, model).float().numpy().tofile(os.path.join(d, "logits.f32"))
        if kind == "nf4":
            damaged(root, config_json, tensors, "model.layers.0.self_attn.q_proj.weight.")
        if kind == "int8":
            bad = dict(tensors)
            bad["model.layers.1.mlp.up_proj.weight_format"] = torch.tensor(1, dtype=torch.uint8)
            write_hf_folder(os.path.join(root, "bad_weight_format"), config_json, bad)
            bad = dict(tensors)
            bad["model.layers.1.mlp.up_proj.SCB"] = bad["model.layers.1.mlp.up_proj.SCB"][:-1].clone()
            write_hf_folder(os.path.join(root, "bad_scb"), config_json, bad)
    return 0


def damaged(root, config_json, tensors, q):
    """DIR/bad_*: one thing wrong each (capi_test_quantize expects an error naming it)."""
    def variant(name, change, conf=None):
        t = dict(tensors)
        change(t)
        write_hf_folder(os.path.join(root, "bad_" + name), conf or config_json, t)

    state = q + "quant_state.bitsandbytes__nf4"
    meta = json.loads(bytes(tensors[state].tolist()).decode())

    def with_meta(**kw):
        m = dict(meta, **kw)
        return lambda t: t.__setitem__(state, torch.tensor(list(json.dumps(m).encode()), dtype=torch.uint8))
    variant("shape", with_meta(shape=[meta["shape"][0] * 2, meta["shape"][1] // 2]))  # as many values
    variant("quant_type", with_meta(quant_type="fp4"))
    variant("json", lambda t: t.__setitem__(state, torch.tensor(list(b'{"quant_type": "nf4", "blocksize": 6'),
                                                                   dtype=torch.uint8)))
    variant("nan", lambda t: t[q + "nested_absmax"].__setitem__(0, float("nan")))
    variant("missing", lambda t: t.pop(q + "nested_absmax"))
    variant("absmax", lambda t: t.__setitem__(q + "absmax", t[q + "absmax"][:-1].clone()))
    for method in ("gptq", "awq"):
        variant(method, lambda t: None, dict(config_json, quantization_config={"quant_method": method, "bits": 4}))


def roundtrip(d, saved):
    want = safetensors_io.read(os.path.join(d, "model.safetensors"))
    got = llama_reference.read_folder(saved)
    problems = []
    for name in sorted(set(want) | set(got)):
        if name.endswith(".weight_format"):  # bitsandbytes' layout marker: accel reads it, need not write it
            continue
        w, g = want.get(name), got.get(name)
        if w is None or g is None:
            problems.append("%s: %s" % (name, "not saved" if g is None else "not in the original"))
        elif "quant_state" in name:
            if bytes(g.tolist()).rstrip(b" ") != bytes(w.tolist()):
                problems.append("%s: %r vs %r" % (name, bytes(g.tolist()).rstrip(), bytes(w.tolist())))
        elif g.dtype != w.dtype or g.shape != w.shape or not torch.equal(g, w):
            problems.append("%s: differs" % name)
    with open(os.path.join(d, "config.json")) as f:
        q_want = json.load(f)["quantization_config"]
    with open(os.path.join(saved, "config.json")) as f:
        q_got = json.load(f)["quantization_config"]
    for k, v in q_want.items():
        if k != "llm_int8_skip_modules" and q_got.get(k) != v:
            problems.append("quantization_config.%s: %r, the original's %r" % (k, q_got.get(k), v))
    if q_got.get("llm_int8_skip_modules") != ["lm_head"]:
        problems.append("quantization_config.llm_int8_skip_modules: %r" % q_got.get("llm_int8_skip_modules"))
    for p in problems:
        print("bnb_reference roundtrip: " + p)
    print("bnb_reference roundtrip: %d tensors of %s, %d differ" % (len(want), saved, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    if sys.argv[1] == "prequantized":
        sys.exit(prequantized(sys.argv[2]))
    if sys.argv[1] == "roundtrip":
        sys.exit(roundtrip(sys.argv[2], sys.argv[3]))
    sys.exit(main(sys.argv[1]))
