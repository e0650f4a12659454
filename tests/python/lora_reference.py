"""LoRA as PEFT's lora.Linear computes it, hand-written on Debian's python3-torch (PEFT is not in Debian):

    y = base(x) + lora_B(lora_A(dropout(x))) * scaling,   lora_A.weight [r, in], lora_B.weight [out, r]
    scaling = lora_alpha / r, or lora_alpha / sqrt(r) with use_rslora

Modules are chosen as PEFT's check_target_module_exists does for a list: a module whose path equals an entry or
ends with "." + entry. Adapter files use PEFT's names: "base_model.model.<module>.lora_A.weight".

Functions: scaling(), targeted(), Adapters (the update term per module, for tests/capi/gpt_reference.logits'
`adapter` hook), LoraLlama (llama_reference.Model whose linear layers carry adapters), merge() (PEFT's
merge_and_unload), peft_keys() and read_adapter() (an adapter folder as PEFT's load would read it).
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_reference  # noqa: E402
import safetensors_io  # noqa: E402

PREFIX = "base_model.model."


def scaling(cfg):
    r, alpha = cfg.get("r", 8), cfg.get("lora_alpha", 8)
    return alpha / math.sqrt(r) if cfg.get("use_rslora", False) else alpha / r


def targeted(module, target_modules):
    return any(module == t or module.endswith("." + t) for t in target_modules)


class Adapters:
    """A and B per module (float64 leaves with gradients): update(x, module) is the term LoRA adds."""

    def __init__(self, tensors, cfg):
        self.s = scaling(cfg)
        self.t = {k: v.detach().double().requires_grad_(True) for k, v in tensors.items() if ".lora_" in k}

    def update(self, x, module):
        a, b = self.t.get(module + ".lora_A.weight"), self.t.get(module + ".lora_B.weight")
        if a is None:
            return 0
        return (x.to(a.dtype) @ a.T) @ b.T * self.s

    __call__ = update


class LoraLlama(llama_reference.Model):
    """The llama reference with LoRA on the linear layers `adapters` has A and B for."""

    def __init__(self, config, weights, adapters):
        super().__init__(config, weights)
        self.adapters = adapters

    def linear(self, x, name):
        u = self.adapters.update(x, name)
        y = super().linear(x, name)
        return y if isinstance(u, int) else y + u.to(y.dtype)


def merge(weights, adapters, fan_in_fan_out=False):
    """PEFT's merge_and_unload: W + scaling * B A (transposed for Conv1D's [in, out] weights), adapters dropped."""
    out = {k: v for k, v in weights.items() if ".lora_" not in k}
    for k in list(adapters.t):
        if not k.endswith(".lora_A.weight"):
            continue
        m = k[: -len(".lora_A.weight")]
        delta = (adapters.t[m + ".lora_B.weight"] @ adapters.t[k]).detach() * adapters.s
        w = out[m + ".weight"]
        out[m + ".weight"] = (w.double() + (delta.T if fan_in_fan_out else delta)).to(w.dtype)
    return out


def peft_keys(modules):
    return sorted(PREFIX + m + s for m in modules for s in (".lora_A.weight", ".lora_B.weight"))


def read_adapter(d):
    """(tensors by PEFT key, adapter_config.json) of an adapter folder, read without accel."""
    with open(os.path.join(d, "adapter_config.json")) as f:
        cfg = json.load(f)
    return safetensors_io.read(os.path.join(d, "adapter_model.safetensors")), cfg
