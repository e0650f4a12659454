"""accel against the real transformers and PEFT (issue 38's checks), in three steps so that the part that needs
them can run on a machine that has them (the GPU machine: transformers 5.17, PEFT) and the rest anywhere:

  make DIR            (transformers, PEFT) write the cases: per llama-family config a save_pretrained folder of
                      a randomly initialised *ForCausalLM (eager attention, float32; one in bfloat16; every other
                      one sharded), ids, its logits and its greedy tokens with and without the KV cache; per LoRA
                      config a PEFT adapter (random A and B) on one base folder and the adapted model's logits.
  check LIBACCEL DIR [WORK]
                      (torch only; libaccel through ctypes) accel's from_pretrained of each folder (strict), its
                      logits (1e-5 of their scale; bfloat16 3e-2), greedy tokens (equal), the adapters loaded by
                      from_pretrained's "adapter" (same logits); writes save_pretrained's folders back for
                      `reverse` (<case>/accel_out; adapters: accel_adapter with adapter_only, accel_merged with
                      merge) into DIR, or into WORK, a fresh copy of DIR. With a GPU in the build, the same logits
                      once more with the model prepared on cuda:0.
  reverse DIR         (transformers, PEFT) transformers' from_pretrained of accel's folders and PEFT's
                      PeftModel.from_pretrained of accel's adapters: no missing or unexpected keys, the same logits.

A step whose packages are absent exits 77 (skipped) saying which. Exit 1 lists every failed comparison.
tests/data/transformers-5.17/ holds cases `make` wrote with transformers 5.17.0 and PEFT 0.21.0 (torch 2.11, on the
GPU machine); ctest's python.transformers_cases runs `check` on them everywhere."""
import ctypes
import json
import os
import shutil
import sys
import traceback

import torch

BASE = {"vocab_size": 53, "hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 64, "initializer_range": 0.3}
# (name, model_type, config keys, rope) - rope: (rope_type, theta, extra keys) or None for the default.
CASES = [
    ("gqa_untied", "llama", dict(BASE, num_key_value_heads=2), None),
    ("mha_tied_biases", "llama", dict(BASE, tie_word_embeddings=True, attention_bias=True, mlp_bias=True), None),
    ("mqa_head_dim", "llama", dict(BASE, num_key_value_heads=1, head_dim=12, rms_norm_eps=1e-5), None),
    ("linear", "llama", dict(BASE, num_key_value_heads=2), ("linear", 500.0, {"factor": 2.0})),
    ("dynamic", "llama", dict(BASE, max_position_embeddings=6), ("dynamic", 10000.0, {"factor": 3.0})),
    ("llama3", "llama", dict(BASE, num_key_value_heads=2),
     ("llama3", 500000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 8})),
    ("mistral_window", "mistral", dict(BASE, num_key_value_heads=2, sliding_window=3), None),
    ("qwen2_window", "qwen2", dict(BASE, num_key_value_heads=2, tie_word_embeddings=True, use_sliding_window=True,
                                   sliding_window=4, max_window_layers=1), None),
    ("gelu_pad", "llama", dict(BASE, hidden_act="gelu_pytorch_tanh", pad_token_id=0, num_hidden_layers=3), None),
]
BF16_CASE = ("bf16_gqa", "llama", dict(BASE, num_key_value_heads=2, tie_word_embeddings=True), None)
LORA_BASE = "gqa_untied"
LORAS = [
    ("lora_qv", {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj", "down_proj"]}),
    ("rslora_all", {"r": 4, "lora_alpha": 16, "use_rslora": True,
                    "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}),
]
B, T, NEW = 2, 9, 7
# bfloat16 logits of the bf16 case are 2.2e-2 of their scale from the same weights computed in float32, in
# transformers and in accel alike (rounding after each operation, this case's weights at initializer_range 0.3);
# the two are 1.8e-2 apart (measured on tests/data/transformers-5.17), so they are held to 3e-2 and equal tokens.
BF16_TOL = 3e-2


def need(*names):
    missing = []
    for n in names:
        try:
            __import__(n)
        except ImportError:
            missing.append(n)
    if missing:
        print(f"skipped: {', '.join(missing)} not installed here (the GPU machine has them)")
        sys.exit(77)


def write_raw(path, t):
    with open(path, "wb") as f:
        f.write(t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16
                else t.contiguous().numpy().tobytes())


def read_raw(path, dtype, shape):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if dtype == torch.bfloat16:
        return torch.frombuffer(data, dtype=torch.int16).view(torch.bfloat16).reshape(shape)
    return torch.frombuffer(data, dtype=dtype).reshape(shape)


# ---------------------------------------------------------------------------------------------------- make
def hf_model(model_type, keys, rope, seed, dtype=torch.float32):
    import transformers
    kw = dict(keys)
    if rope:
        kind, theta, extra = rope
        if int(transformers.__version__.split(".")[0]) >= 5:
            kw["rope_parameters"] = dict({"rope_type": kind, "rope_theta": theta}, **extra)
        else:
            kw["rope_theta"], kw["rope_scaling"] = theta, dict({"rope_type": kind}, **extra)
    cfg = transformers.AutoConfig.for_model(model_type, **kw)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    with torch.no_grad():  # norms start at one: move them so that their weights count
        for n, p in model.named_parameters():
            if "norm" in n:
                p.add_(0.2 * torch.randn_like(p))
    return model.to(dtype).eval()


def greedy(model, ids, cached):
    seq = ids.clone()
    with torch.no_grad():
        if not cached:
            for _ in range(NEW):
                nxt = model(seq).logits[:, -1].argmax(-1, keepdim=True)
                seq = torch.cat([seq, nxt], 1)
            return seq
        out = model(seq, use_cache=True)
        for i in range(NEW):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], 1)
            if i + 1 < NEW:
                out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
        return seq


def make_case(root, case, dtype=torch.float32):
    name, model_type, keys, rope = case
    d = os.path.join(root, name)
    model = hf_model(model_type, keys, rope, seed=len(name), dtype=dtype)
    model.save_pretrained(os.path.join(d, "hf"), max_shard_size="20KB" if len(name) % 2 else "10GB")
    ids = torch.randint(0, keys["vocab_size"], (B, T), generator=torch.Generator().manual_seed(7))
    ids[0, 2] = 0
    write_raw(os.path.join(d, "ids.bin"), ids)
    with torch.no_grad():
        write_raw(os.path.join(d, "logits.bin"), model(ids).logits)
    write_raw(os.path.join(d, "gen_nocache.bin"), greedy(model, ids, False))
    write_raw(os.path.join(d, "gen_cache.bin"), greedy(model, ids, True))
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"vocab_size": keys["vocab_size"], "dtype": str(dtype).split(".")[-1]}, f)
    return model, ids


def make_lora(root, name, opts, ids):
    import peft
    import transformers
    base_dir = os.path.join(root, LORA_BASE, "hf")
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, attn_implementation="eager").eval()
    torch.manual_seed(len(name))
    pm = peft.get_peft_model(model, peft.LoraConfig(lora_dropout=0.0, init_lora_weights=False, **opts)).eval()
    d = os.path.join(root, name)
    pm.save_pretrained(os.path.join(d, "adapter"))
    write_raw(os.path.join(d, "ids.bin"), ids)
    with torch.no_grad():
        write_raw(os.path.join(d, "logits.bin"), pm(ids).logits)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"vocab_size": BASE["vocab_size"], "dtype": "float32", "base": LORA_BASE}, f)


def make(root):
    need("transformers", "peft")
    import peft
    import transformers
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "versions.json"), "w") as f:
        json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                   "peft": peft.__version__}, f)
    bases, failed = {}, []
    for case, dtype in [(c, torch.float32) for c in CASES] + [(BF16_CASE, torch.bfloat16)]:
        try:  # one case's failure is reported; the others are still written
            bases[case[0]] = make_case(root, case, dtype)
            print(f"made {case[0]}", flush=True)
        except Exception:
            failed.append(case[0])
            traceback.print_exc()
    print(open(os.path.join(root, "llama3", "hf", "config.json")).read() if "llama3" in bases else "", flush=True)
    for name, opts in LORAS:
        try:
            make_lora(root, name, opts, bases[LORA_BASE][1])
            print(f"made {name}", flush=True)
        except Exception:
            failed.append(name)
            traceback.print_exc()
    if failed:
        sys.exit(f"not written: {failed}")


# ---------------------------------------------------------------------------------------------------- check
class Accel:
    """The few C entry points the checks need, through ctypes."""
    DTYPES = {torch.float32: 0, torch.bfloat16: 3, torch.int64: 8}

    def __init__(self, path):
        self.lib = lib = ctypes.CDLL(path)
        lib.accel_last_error_message.restype = ctypes.c_char_p
        for f in ("accel_tensor_free", "accel_model_free", "accel_accelerator_free", "accel_string_free"):
            getattr(lib, f).argtypes = [ctypes.c_void_p]
            getattr(lib, f).restype = None

    def ok(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.accel_last_error_message().decode()}")

    def handle(self, fn, what, *args):
        out = ctypes.c_void_p()
        self.ok(fn(*args, ctypes.byref(out)), what)
        return out

    def from_pretrained(self, path, options):
        return self.handle(self.lib.accel_model_from_pretrained, f"from_pretrained({path})", path.encode(),
                           json.dumps(options).encode())

    def tensor(self, t):
        t = t.contiguous()
        shape = (ctypes.c_int64 * t.dim())(*t.shape)
        data = t.numpy().tobytes()
        return self.handle(self.lib.accel_tensor_create, "tensor_create", data, ctypes.c_size_t(len(data)),
                           ctypes.c_int32(self.DTYPES[t.dtype]), shape, ctypes.c_size_t(t.dim()))

    def to_torch(self, h):
        lib, nd, dt, nb = self.lib, ctypes.c_size_t(), ctypes.c_int32(), ctypes.c_size_t()
        self.ok(lib.accel_tensor_get_ndim(h, ctypes.byref(nd)), "get_ndim")
        shape = (ctypes.c_int64 * nd.value)()
        self.ok(lib.accel_tensor_get_shape(h, shape, nd), "get_shape")
        self.ok(lib.accel_tensor_get_dtype(h, ctypes.byref(dt)), "get_dtype")
        self.ok(lib.accel_tensor_get_nbytes(h, ctypes.byref(nb)), "get_nbytes")
        buf = ctypes.create_string_buffer(nb.value)
        self.ok(lib.accel_tensor_copy_to_buffer(h, buf, nb), "copy_to_buffer")
        dtype = {v: k for k, v in self.DTYPES.items()}[dt.value]
        raw = bytearray(buf.raw)
        t = (torch.frombuffer(raw, dtype=torch.int16).view(torch.bfloat16) if dtype == torch.bfloat16
             else torch.frombuffer(raw, dtype=dtype))
        return t.reshape(list(shape)).clone()

    def call_tensor(self, fn, what, model, t, *extra):
        x = self.tensor(t)
        try:
            out = self.handle(fn, what, model, x, *extra)
        finally:
            self.lib.accel_tensor_free(x)
        try:
            return self.to_torch(out)
        finally:
            self.lib.accel_tensor_free(out)

    def forward(self, model, ids):
        return self.call_tensor(self.lib.accel_model_forward_no_grad, "forward_no_grad", model, ids)

    def generate(self, model, ids, cached):
        opts = json.dumps({"max_new_tokens": NEW, "use_cache": cached}).encode()
        return self.call_tensor(self.lib.accel_model_generate, "generate", model, ids, opts)

    def save_pretrained(self, model, path, options):
        self.ok(self.lib.accel_model_save_pretrained(model, path.encode(), json.dumps(options).encode()),
                f"save_pretrained({path})")

    def prepare_on_gpu(self, model):
        """The model prepared by an accelerator that picks the GPU; None where this build or machine has none."""
        acc = self.handle(self.lib.accel_accelerator_create, "accelerator_create", b"{}")
        p = ctypes.c_void_p()
        self.ok(self.lib.accel_accelerator_get_device(acc, ctypes.byref(p)), "get_device")
        dev = ctypes.string_at(p).decode()
        self.lib.accel_string_free(p)
        if not dev.startswith("cuda"):
            self.lib.accel_accelerator_free(acc)
            return None, dev
        self.ok(self.lib.accel_accelerator_prepare(acc, model, None, None, None), "prepare")
        return acc, dev


def scale_err(got, want):
    return ((got.float() - want.float()).abs().max() / max(1.0, want.float().abs().max().item())).item()


def compare_logits(failures, tag, got, want, tol):
    if got.shape != want.shape:
        failures.append(f"{tag}: logits of shape {list(got.shape)}, want {list(want.shape)}")
        return None
    err = scale_err(got, want)
    if not err <= tol:
        failures.append(f"{tag}: logits differ by {err:.3g} of their scale (tolerance {tol})")
    return err


def on_gpu(a, m, ids, want, tol, failures, name, want_gen=None):
    """The logits (and greedy tokens) once more with the model prepared where the accelerator puts it: a GPU when
    this build and machine have one. GPU kernels round differently: 20 times a float32 tolerance."""
    acc, dev = a.prepare_on_gpu(m)
    if acc is None:
        return f"; no GPU ({dev})"
    try:
        e = compare_logits(failures, f"{name} on {dev}", a.forward(m, ids), want, tol if tol >= 1e-2 else 20 * tol)
        line = f"; on {dev}: logits {e:.3g}"
        if want_gen is not None:
            # the same history as the cases' (a dynamic rope keeps the longest length seen): without the cache first
            a.generate(m, ids, False)
            g = torch.equal(a.generate(m, ids, True), want_gen)
            if not g:
                failures.append(f"{name} on {dev}: greedy tokens differ")
            line += f", generation {'equal' if g else 'DIFFERENT'}"
        return line
    finally:
        a.lib.accel_accelerator_free(acc)


def check_llama(a, d, name, failures, gpu):
    meta = json.load(open(os.path.join(d, "meta.json")))
    V, dtype = meta["vocab_size"], getattr(torch, meta["dtype"])
    tol = BF16_TOL if dtype == torch.bfloat16 else 1e-5
    ids = read_raw(os.path.join(d, "ids.bin"), torch.int64, (B, T))
    want = read_raw(os.path.join(d, "logits.bin"), dtype, (B, T, V))
    m = a.from_pretrained(os.path.join(d, "hf"), {"strict": True})
    try:
        err = compare_logits(failures, name, a.forward(m, ids), want, tol)
        gens = []
        for cached, fname in ((False, "gen_nocache.bin"), (True, "gen_cache.bin")):
            want_gen = read_raw(os.path.join(d, fname), torch.int64, (B, T + NEW))
            got_gen = a.generate(m, ids, cached)
            gens.append(torch.equal(got_gen, want_gen))
            if not gens[-1]:
                failures.append(f"{name}: greedy tokens (use_cache {cached}) {got_gen.tolist()} vs {want_gen.tolist()}")
        a.save_pretrained(m, os.path.join(d, "accel_out"), {})
        line = f"{name}: logits {err if err is None else f'{err:.3g}'} of their scale, generation " + \
            ("equal" if all(gens) else "DIFFERENT")
    finally:
        a.lib.accel_model_free(m)
    if gpu:  # a fresh model: the dynamic rope keeps the longest sequence it has seen, as transformers' does
        m = a.from_pretrained(os.path.join(d, "hf"), {"strict": True})
        try:
            line += on_gpu(a, m, ids, want, tol, failures, name,
                           read_raw(os.path.join(d, "gen_cache.bin"), torch.int64, (B, T + NEW)))
        finally:
            a.lib.accel_model_free(m)
    print(line, flush=True)


def check_lora(a, root, name, failures, gpu):
    d = os.path.join(root, name)
    meta = json.load(open(os.path.join(d, "meta.json")))
    V = meta["vocab_size"]
    ids = read_raw(os.path.join(d, "ids.bin"), torch.int64, (B, T))
    want = read_raw(os.path.join(d, "logits.bin"), torch.float32, (B, T, V))
    base = os.path.join(root, meta["base"], "hf")
    m = a.from_pretrained(base, {"strict": True, "adapter": os.path.join(d, "adapter")})
    try:
        err = compare_logits(failures, name, a.forward(m, ids), want, 1e-5)
        a.save_pretrained(m, os.path.join(d, "accel_adapter"), {"adapter_only": True})
        a.save_pretrained(m, os.path.join(d, "accel_merged"), {"merge": True})
    finally:
        a.lib.accel_model_free(m)
    m = a.from_pretrained(base, {"strict": True, "adapter": os.path.join(d, "accel_adapter")})
    try:
        err2 = compare_logits(failures, f"{name} (accel's adapter read back)", a.forward(m, ids), want, 1e-5)
        line = f"{name}: logits {err:.3g} of their scale; accel's adapter folder read back {err2:.3g}"
        if gpu:
            line += on_gpu(a, m, ids, want, 1e-5, failures, name)
    finally:
        a.lib.accel_model_free(m)
    print(line, flush=True)


def check_quantized(a, root, failures):
    """4-bit (nf4, double quantization) and 8-bit weights of one base folder: the logits on the GPU against the
    same quantized model's on the CPU (the dequantized weights are equal; only the matmuls round differently)."""
    d = os.path.join(root, LORA_BASE)
    ids = read_raw(os.path.join(d, "ids.bin"), torch.int64, (B, T))
    for name, cfg in (("nf4", {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True,
                                "bnb_4bit_compute_dtype": "fp32"}),
                      ("int8", {"load_in_8bit": True})):
        m = a.from_pretrained(os.path.join(d, "hf"), {"strict": True})
        try:
            a.ok(a.lib.accel_model_quantize(m, json.dumps(cfg).encode()), f"quantize {name}")
            cpu = a.forward(m, ids)
            print(f"{LORA_BASE} quantized {name}: {scale_err(cpu, read_raw(os.path.join(d, 'logits.bin'), torch.float32, cpu.shape)):.3g} of the float logits' scale from them"
                  + on_gpu(a, m, ids, cpu, 1e-5, failures, f"{LORA_BASE} {name}"), flush=True)
        finally:
            a.lib.accel_model_free(m)


def check(lib, root, work=None):
    if work:  # the cases as they were written stay as they are: accel's folders go into a copy
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(root, work)
        root = work
    a = Accel(lib)
    gpu = os.environ.get("REAL_CHECK_GPU", "1") == "1"
    versions = json.load(open(os.path.join(root, "versions.json")))
    print(f"cases written by {versions}", flush=True)
    failures = []
    for name in [c[0] for c in CASES] + [BF16_CASE[0]]:
        try:
            check_llama(a, os.path.join(root, name), name, failures, gpu)
        except Exception as e:  # one case's failure is reported; the others still run
            failures.append(f"{name}: {e}")
            traceback.print_exc()
    for name, _ in LORAS:
        try:
            check_lora(a, root, name, failures, gpu)
        except Exception as e:
            failures.append(f"{name}: {e}")
            traceback.print_exc()
    if gpu:
        try:
            check_quantized(a, root, failures)
        except Exception as e:
            failures.append(f"quantized: {e}")
            traceback.print_exc()
    return failures


# ---------------------------------------------------------------------------------------------------- reverse
def reverse(root):
    need("transformers", "peft")
    import peft
    import transformers
    failures = []

    def load(path):
        m, info = transformers.AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager",
                                                                    output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            failures.append(f"{path}: transformers reports {bad}")
        return m.eval()

    for name in [c[0] for c in CASES] + [BF16_CASE[0]]:
        d = os.path.join(root, name)
        if not os.path.isdir(os.path.join(d, "accel_out")):
            failures.append(f"{name}: no accel_out (run check first)")
            continue
        try:
            meta = json.load(open(os.path.join(d, "meta.json")))
            dtype = getattr(torch, meta["dtype"])
            ids = read_raw(os.path.join(d, "ids.bin"), torch.int64, (B, T))
            want = read_raw(os.path.join(d, "logits.bin"), dtype, (B, T, meta["vocab_size"]))
            with torch.no_grad():
                got = load(os.path.join(d, "accel_out"))(ids).logits
            err = compare_logits(failures, f"{name}: transformers on accel's folder", got, want,
                                 BF16_TOL if dtype == torch.bfloat16 else 1e-5)
            print(f"{name}: transformers' from_pretrained of accel's save_pretrained: logits {err:.3g}", flush=True)
        except Exception as e:
            failures.append(f"{name}: {e}")
            traceback.print_exc()
    for name, _ in LORAS:
        d = os.path.join(root, name)
        try:
            meta = json.load(open(os.path.join(d, "meta.json")))
            ids = read_raw(os.path.join(d, "ids.bin"), torch.int64, (B, T))
            want = read_raw(os.path.join(d, "logits.bin"), torch.float32, (B, T, meta["vocab_size"]))
            base = load(os.path.join(root, meta["base"], "hf"))
            pm = peft.PeftModel.from_pretrained(base, os.path.join(d, "accel_adapter")).eval()
            with torch.no_grad():
                e1 = compare_logits(failures, f"{name}: PEFT on accel's adapter", pm(ids).logits, want, 1e-5)
                e2 = compare_logits(failures, f"{name}: transformers on accel's merged folder",
                                    load(os.path.join(d, "accel_merged"))(ids).logits, want, 1e-5)
            print(f"{name}: PeftModel.from_pretrained of accel's adapter {e1:.3g}; merged folder {e2:.3g}", flush=True)
        except Exception as e:
            failures.append(f"{name}: {e}")
            traceback.print_exc()
    return failures


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("make", "check", "reverse"):
        sys.exit(__doc__)
    torch.set_num_threads(1)
    if sys.argv[1] == "make":
        make(sys.argv[2])
        return
    failures = check(*sys.argv[2:5]) if sys.argv[1] == "check" else reverse(sys.argv[2])
    if failures:
        sys.exit("FAILED:\n" + "\n".join(failures))
    print(f"transformers_real_check {sys.argv[1]}: all equal")


if __name__ == "__main__":
    main()
