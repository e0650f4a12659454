"""Reference for accel's "llama" model (Llama / Mistral / Qwen2), on Debian's python3-torch only (no transformers).

Written from the architecture's equations as transformers' modeling_llama.py / modeling_rope_utils.py compute them
(eager attention), with Hugging Face's parameter names, so that a folder written here is what
LlamaForCausalLM.save_pretrained writes and a state dict from accel is what transformers loads:

  h = embed_tokens[ids]                       (nn.Embedding(padding_idx=pad_token_id): that row gets no gradient)
  per layer i:
    x = rms(h; input_layernorm)
    q, k, v = q_proj(x), k_proj(x), v_proj(x)  -> heads of head_dim: q n_heads, k and v num_key_value_heads
    q, k = rope(q), rope(k)                     at absolute positions past .. past + T - 1
    k, v repeated n_heads / num_key_value_heads times per head (GQA, repeat_kv: head j uses kv head j // n_rep)
    A = softmax(q k^T * head_dim^-0.5 masked causally (and by sliding_window), in float32) v
    h = h + o_proj(merge(A))
    h = h + down_proj(act(gate_proj(x')) * up_proj(x')),  x' = rms(h; post_attention_layernorm)
  logits = lm_head(rms(h; norm))              (lm_head.weight is embed_tokens.weight when tie_word_embeddings)
  rms(x; w) = w * (x / sqrt(mean(x^2) + rms_norm_eps))   computed in float32, cast back before the weight
  rope(x) = x cos + rotate_half(x) sin, rotate_half([a, b]) = [-b, a], angles = position * inv_freq (each twice)
  inv_freq = 1 / rope_theta^(2j / dim), j < dim / 2, dim = head_dim; rope_scaling:
    linear:  inv_freq / factor
    dynamic: for seq_len = max position + 1 > max_position_embeddings, rope_theta becomes
             rope_theta * (factor seq_len / max_position_embeddings - (factor - 1))^(dim / (dim - 2)); transformers
             keeps the largest seq_len seen (dynamic_rope_update) until a sequence shorter than
             max_position_embeddings resets it: DynamicRope below keeps the same state
    llama3:  wavelen = 2 pi / inv_freq; wavelen > ompe / low_freq_factor: inv_freq / factor; wavelen < ompe /
             high_freq_factor: unchanged; between: (1 - s) inv_freq / factor + s inv_freq,
             s = (ompe / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor),
             ompe = original_max_position_embeddings
  Biases: attention_bias puts biases on q/k/v/o (Llama); model_type qwen2 has q/k/v biases and none on o;
  mlp_bias on gate/up/down.

The float32 path uses the operations accel's src/model/llama_model.cpp uses, in the same order, so that with the
same LibTorch and one thread the two agree bit for bit (the tests only require 1e-5).

Command line (for tests in other languages):
  llama_reference.py write DIR CONFIG_JSON [SEED [MAX_SHARD_BYTES]]
      writes DIR/config.json and DIR/model.safetensors (or shards + model.safetensors.index.json)
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

import safetensors_io  # beside this file

# transformers' defaults per model_type (LlamaConfig, MistralConfig, Qwen2Config).
DEFAULTS = {
    "llama": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
              "num_attention_heads": 32, "max_position_embeddings": 2048},
    "mistral": {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "max_position_embeddings": 4096 * 32,
                "sliding_window": 4096},
    "qwen2": {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
              "num_attention_heads": 32, "num_key_value_heads": 32, "max_position_embeddings": 32768,
              "sliding_window": 4096, "use_sliding_window": False, "max_window_layers": 28},
}
COMMON = {"num_key_value_heads": None, "head_dim": None, "hidden_act": "silu", "initializer_range": 0.02,
          "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": None, "attention_bias": False,
          "attention_dropout": 0.0, "mlp_bias": False, "tie_word_embeddings": False, "pad_token_id": None,
          "sliding_window": None}


def normalize(config):
    """The config with transformers' defaults filled in (model_type defaults to llama)."""
    mt = config.get("model_type", "llama")
    c = dict(COMMON)
    c.update(DEFAULTS[mt])
    c.update({k: v for k, v in config.items() if k != "type"})
    c["model_type"] = mt
    if c["num_key_value_heads"] is None:
        c["num_key_value_heads"] = c["num_attention_heads"]
    if c["head_dim"] is None:
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    return c


def biases(c):
    """(q/k/v bias, o_proj bias) as the model_type's attention builds them."""
    if c["model_type"] == "qwen2":
        return True, False
    if c["model_type"] == "mistral":
        return False, False
    return c["attention_bias"], c["attention_bias"]


def window(c, layer):
    """The sliding window of a layer (None: full causal attention), as transformers' mistral / qwen2 decide it."""
    if c["model_type"] == "mistral":
        return c.get("sliding_window")
    if c["model_type"] == "qwen2" and c.get("use_sliding_window") and layer >= c.get("max_window_layers", 28):
        return c.get("sliding_window")
    return None


def layout(config):
    """[(name, shape)] in LlamaForCausalLM.named_parameters() order."""
    c = normalize(config)
    e, v, hd = c["hidden_size"], c["vocab_size"], c["head_dim"]
    nh, kv, inner = c["num_attention_heads"], c["num_key_value_heads"], c["intermediate_size"]
    qkv_b, o_b = biases(c)
    out = [("model.embed_tokens.weight", [v, e])]
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for name, rows in (("q_proj", nh * hd), ("k_proj", kv * hd), ("v_proj", kv * hd)):
            out.append((p + f"self_attn.{name}.weight", [rows, e]))
            if qkv_b:
                out.append((p + f"self_attn.{name}.bias", [rows]))
        out.append((p + "self_attn.o_proj.weight", [e, nh * hd]))
        if o_b:
            out.append((p + "self_attn.o_proj.bias", [e]))
        for name, shape in (("gate_proj", [inner, e]), ("up_proj", [inner, e]), ("down_proj", [e, inner])):
            out.append((p + f"mlp.{name}.weight", shape))
            if c["mlp_bias"]:
                out.append((p + f"mlp.{name}.bias", [shape[0]]))
        out += [(p + "input_layernorm.weight", [e]), (p + "post_attention_layernorm.weight", [e])]
    out.append(("model.norm.weight", [e]))
    if not c["tie_word_embeddings"]:
        out.append(("lm_head.weight", [v, e]))
    return out


def random_weights(config, seed):
    """Weights for tests (not HF's initialisation: larger, so that every term shows in the logits). In layout
    order, each drawn with torch.randn(shape) after torch.manual_seed(seed): norms 1 + 0.1 r, biases 0.1 r,
    embeddings 0.5 r, other weights 0.2 r."""
    torch.manual_seed(seed)
    out = {}
    for name, shape in layout(config):
        r = torch.randn(shape, dtype=torch.float32)
        if name.endswith("norm.weight"):
            out[name] = 1 + 0.1 * r
        elif name.endswith(".bias"):
            out[name] = 0.1 * r
        elif "embed_tokens" in name or name == "lm_head.weight":
            out[name] = 0.5 * r
        else:
            out[name] = 0.2 * r
    c = normalize(config)
    if c["pad_token_id"] is not None:
        out["model.embed_tokens.weight"][c["pad_token_id"]] = 0  # nn.Embedding's padding row starts at zero
    return out


# ---- rotary embeddings -------------------------------------------------------------------------------------------

def base_inv_freq(theta, dim):
    exps = torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float32) / dim
    return torch.reciprocal(torch.pow(theta, exps))


def scaled_inv_freq(c, seq_len):
    """inv_freq for a forward whose largest position is seq_len - 1 (seq_len as dynamic_rope_update keeps it)."""
    dim, theta, rs = c["head_dim"], float(c["rope_theta"]), c["rope_scaling"]
    kind = None if rs is None else rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return base_inv_freq(theta, dim)
    factor = float(rs["factor"])
    if kind == "linear":
        return base_inv_freq(theta, dim) / factor
    if kind == "dynamic":
        m = c["max_position_embeddings"]
        s = max(seq_len, m)
        theta = theta * ((factor * s / m) - (factor - 1)) ** (dim / (dim - 2))
        return base_inv_freq(theta, dim)
    if kind == "llama3":
        inv = base_inv_freq(theta, dim)
        lo, hi = float(rs["low_freq_factor"]), float(rs["high_freq_factor"])
        old = float(rs["original_max_position_embeddings"])
        wavelen = torch.reciprocal(inv) * (2 * math.pi)
        scaled = torch.where(wavelen > old / lo, inv / factor, inv)
        smooth = (torch.reciprocal(wavelen) * old - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = torch.logical_not(wavelen < old / hi) & torch.logical_not(wavelen > old / lo)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(f"rope_scaling type {kind} not in the reference")


class DynamicRope:
    """transformers' dynamic_rope_update state: the longest sequence seen, reset below max_position_embeddings."""

    def __init__(self, c):
        self.c = c
        self.cached = c["max_position_embeddings"]

    def seq_len(self, seq_len):
        m = self.c["max_position_embeddings"]
        if seq_len > self.cached:
            self.cached = seq_len
        if seq_len < m and self.cached > m:
            self.cached = m
        return self.cached


def rope_cos_sin(c, positions, state):
    """cos, sin [T, head_dim] for integer positions [T]."""
    seq_len = int(positions.max()) + 1
    kind = None if c["rope_scaling"] is None else c["rope_scaling"].get("rope_type", c["rope_scaling"].get("type"))
    if kind == "dynamic":
        seq_len = state.seq_len(seq_len)
    inv = scaled_inv_freq(c, seq_len)
    freqs = torch.outer(positions.to(torch.float32), inv)
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    a, b = x.chunk(2, -1)
    return torch.cat((-b, a), -1)


def apply_rope(x, cos, sin):
    return x * cos + rotate_half(x) * sin


# ---- the model ---------------------------------------------------------------------------------------------------

def rms_norm(x, w, eps):
    dtype = x.dtype
    x32 = x.to(torch.float32)
    var = x32.pow(2).mean(-1, keepdim=True)
    return w * (x32 * torch.rsqrt(var + eps)).to(dtype)


def act(name, x):
    if name in ("silu", "swish"):
        return F.silu(x)
    if name == "gelu":
        return F.gelu(x)
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu(x)
    raise ValueError(name)


class Model:
    """Functional model over a dict of HF-named tensors. forward(ids, cache) with cache a list of (k, v) per layer
    (None for no cache) returns float32 logits [B, T, vocab]."""

    def __init__(self, config, weights):
        self.c = normalize(config)
        self.w = weights
        self.rope = DynamicRope(self.c)

    def linear(self, x, name):
        return F.linear(x, self.w[name + ".weight"], self.w.get(name + ".bias"))

    def forward(self, ids, cache=None):
        c, w = self.c, self.w
        B, T = ids.shape
        past = 0 if not cache or cache[0] is None else cache[0][0].shape[2]
        nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
        h = F.embedding(ids, w["model.embed_tokens.weight"], padding_idx=c["pad_token_id"])
        cos, sin = rope_cos_sin(c, torch.arange(past, past + T), self.rope)
        cos, sin = cos.to(h.dtype), sin.to(h.dtype)
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            x = rms_norm(h, w[p + "input_layernorm.weight"], c["rms_norm_eps"])
            q = self.linear(x, p + "self_attn.q_proj").reshape(B, T, nh, hd).transpose(1, 2)
            k = self.linear(x, p + "self_attn.k_proj").reshape(B, T, kv, hd).transpose(1, 2)
            v = self.linear(x, p + "self_attn.v_proj").reshape(B, T, kv, hd).transpose(1, 2)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
            if cache is not None:
                if cache[i] is not None:
                    k = torch.cat((cache[i][0], k), 2)
                    v = torch.cat((cache[i][1], v), 2)
                cache[i] = (k, v)
            n_rep = nh // kv
            S = k.shape[2]
            kr = k[:, :, None].expand(B, kv, n_rep, S, hd).reshape(B, nh, S, hd)
            vr = v[:, :, None].expand(B, kv, n_rep, S, hd).reshape(B, nh, S, hd)
            scores = torch.matmul(q, kr.transpose(2, 3)) * (hd ** -0.5)
            qpos = torch.arange(past, past + T)[:, None]
            kpos = torch.arange(S)[None, :]
            hidden = kpos > qpos
            win = window(c, i)
            if win is not None:
                hidden = hidden | (qpos - kpos >= win)
            scores = scores.masked_fill(hidden, float("-inf"))
            a = torch.softmax(scores, -1, dtype=torch.float32).to(q.dtype)
            y = torch.matmul(a, vr).transpose(1, 2).reshape(B, T, nh * hd)
            h = h + self.linear(y, p + "self_attn.o_proj")
            x = rms_norm(h, w[p + "post_attention_layernorm.weight"], c["rms_norm_eps"])
            gate = act(c["hidden_act"], self.linear(x, p + "mlp.gate_proj"))
            h = h + self.linear(gate * self.linear(x, p + "mlp.up_proj"), p + "mlp.down_proj")
        h = rms_norm(h, w["model.norm.weight"], c["rms_norm_eps"])
        head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
        return F.linear(h, head)


# `model` (optional, in the three functions below): a Model whose dynamic-rope state (the longest sequence seen)
# carries over from earlier calls, as it does on one transformers (or accel) model object.

def logits(config, weights, ids, model=None):
    with torch.no_grad():
        return (model or Model(config, weights)).forward(ids)


def generate(config, weights, ids, max_new_tokens, use_cache=True, model=None):
    """Greedy decoding (argmax of the last position's logits), with or without the key/value cache."""
    m = model or Model(config, weights)
    cache = [None] * m.c["num_hidden_layers"] if use_cache else None
    out = ids
    with torch.no_grad():
        for step in range(max_new_tokens):
            inp = out if (step == 0 or not use_cache) else out[:, -1:]
            nxt = m.forward(inp, cache)[:, -1].argmax(-1)
            out = torch.cat((out, nxt[:, None]), 1)
    return out


def train(config, weights, batches, lr, optimizer="sgd", model=None):
    """A plain loop: per batch (inputs, labels) the causal_lm loss (cross entropy of logits [B T, V] against labels
    [B T], mean), backward, one torch.optim step (SGD without momentum, or AdamW with torch's defaults and
    weight_decay 0.01). Returns the losses and the trained weights (tied weights as one tensor)."""
    w = {k: v.clone().requires_grad_(True) for k, v in weights.items()}
    params = [w[n] for n, _ in layout(config)]
    opt = torch.optim.SGD(params, lr=lr) if optimizer == "sgd" else torch.optim.AdamW(params, lr=lr)
    m = Model(config, w)
    if model is not None:
        m.rope = model.rope
    losses = []
    for inputs, labels in batches:
        out = m.forward(inputs)
        loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach() for k, v in w.items()}


# ---- Hugging Face folders ----------------------------------------------------------------------------------------

def read_folder(d):
    """A save_pretrained folder's tensors (single file or the shards its index lists)."""
    index = os.path.join(d, "model.safetensors.index.json")
    if not os.path.exists(index):
        return safetensors_io.read(os.path.join(d, "model.safetensors"))
    with open(index) as f:
        wmap = json.load(f)["weight_map"]
    out = {}
    for shard in sorted(set(wmap.values())):
        out.update(safetensors_io.read(os.path.join(d, shard)))
    return out


def hf_config(config, dtype=torch.float32):
    c = normalize(config)
    arch = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}
    out = {k: v for k, v in c.items() if not (k in ("sliding_window", "use_sliding_window", "max_window_layers")
                                              and c["model_type"] == "llama")}
    if c["model_type"] != "llama":
        for k in ("attention_bias", "mlp_bias"):
            out.pop(k, None)
    out.update(architectures=[arch[c["model_type"]]], torch_dtype=str(dtype).replace("torch.", ""),
               bos_token_id=1, eos_token_id=2, use_cache=True, transformers_version="4.46.0")
    return out


def write_folder(d, config, weights, max_shard_size=None, dtype=torch.float32):
    """What save_pretrained writes: config.json and model.safetensors, or, when the weights exceed max_shard_size
    bytes, model-0000i-of-0000n.safetensors filled in layout order plus model.safetensors.index.json."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(config, dtype), f, indent=2)
    tensors = {n: weights[n].to(dtype) for n, _ in layout(config)}
    sizes = {n: t.numel() * t.element_size() for n, t in tensors.items()}
    if max_shard_size is None or sum(sizes.values()) <= max_shard_size:
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(safetensors_io.to_bytes(tensors))
        return
    shards, cur, cur_size = [], {}, 0
    for n, t in tensors.items():
        if cur and cur_size + sizes[n] > max_shard_size:
            shards.append(cur)
            cur, cur_size = {}, 0
        cur[n] = t
        cur_size += sizes[n]
    shards.append(cur)
    wmap = {}
    for i, shard in enumerate(shards):
        name = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        with open(os.path.join(d, name), "wb") as f:
            f.write(safetensors_io.to_bytes(shard))
        wmap.update({n: name for n in shard})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(sizes.values())}, "weight_map": wmap}, f, indent=2)


def main():
    if len(sys.argv) < 4 or sys.argv[1] != "write":
        sys.exit(__doc__)
    d, config = sys.argv[2], json.loads(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    shard = int(sys.argv[5]) if len(sys.argv) > 5 else None
    write_folder(d, config, random_weights(config, seed), shard)


if __name__ == "__main__":
    main()
