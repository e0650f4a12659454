"""A reference of bitsandbytes' quantized formats written from ../shared/spec/precision-and-quantization.md
sections 3-4 (bitsandbytes itself is not in Debian): it quantizes the float weights accel saved and checks, bit for
bit, what accel's accel_model_quantize saved for the same model: NF4 with double quantization, FP4, and LLM.int8's
rows (weight, absmax, quant_map, nested_absmax, nested_quant_map, the quant_state JSON, SCB). Run by
capi_test_quantize reference. Usage: bnb_reference.py DIR (DIR/{float,nf4,fp4,int8}/model.safetensors)."""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
