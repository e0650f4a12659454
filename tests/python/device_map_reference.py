"""accel's infer_auto_device_map, get_balanced_memory and compute_module_sizes against the real Accelerate 0.24.1.

  device_map_reference.py DRIVER PEER_DIR

For GPT-2 and Llama models (tied and untied heads), the same module tree is built in Python on the meta device,
with transformers' module names, registration order and layer class names (GPT2Block, LlamaDecoderLayer), and
Accelerate computes sizes and device maps for budgets that put modules on GPUs, the CPU and the disk, with and
without no_split_module_classes, with a smaller dtype, and balanced over two GPUs. DRIVER (device_map_driver.c)
answers for accel through the C API. Maps are compared as dicts (clean_device_map's order depends on Python's set
order). Skips (exit 0, a printed reason) when Accelerate cannot import.
"""
import json
import subprocess
import sys

DRIVER, PEER = sys.argv[1:3]
sys.path.insert(0, PEER)
try:
    import torch
    from torch import nn
    from accelerate.utils import compute_module_sizes, get_balanced_memory, get_max_layer_size, infer_auto_device_map
except Exception as e:  # noqa: BLE001 - any import failure means the peer cannot run here
    print(f"SKIP: accelerate {PEER} cannot be imported here: {e!r}")
    sys.exit(0)
import logging  # noqa: E402

# GPU budgets without GPUs: Accelerate warns ("Device 0 is not available") and goes on, as the maps need no GPU.
logging.getLogger("accelerate").setLevel(logging.ERROR)


def cls(name):
    return type(name, (nn.Module,), {})


def leaf(class_name, **shapes):
    m = cls(class_name)()
    for n, shape in shapes.items():
        m.register_parameter(n, nn.Parameter(torch.empty(shape, device="meta")))
    return m


def container(class_name, **children):
    m = cls(class_name)()
    for n, c in children.items():
        m.add_module(n, c)
    return m


def gpt2(V, P, C, L, tied):
    I = 4 * C
    ln = lambda: leaf("LayerNorm", weight=[C], bias=[C])
    block = lambda: container(
        "GPT2Block", ln_1=ln(),
        attn=container("GPT2Attention", c_attn=leaf("Conv1D", weight=[C, 3 * C], bias=[3 * C]),
                       c_proj=leaf("Conv1D", weight=[C, C], bias=[C])),
        ln_2=ln(),
        mlp=container("GPT2MLP", c_fc=leaf("Conv1D", weight=[C, I], bias=[I]),
                      c_proj=leaf("Conv1D", weight=[I, C], bias=[C])))
    transformer = container("GPT2Model", wte=leaf("Embedding", weight=[V, C]), wpe=leaf("Embedding", weight=[P, C]),
                            h=nn.ModuleList([block() for _ in range(L)]), ln_f=ln())
    root = container("GPT2LMHeadModel", transformer=transformer, lm_head=leaf("Linear", weight=[V, C]))
    if tied:
        root.lm_head.weight = root.transformer.wte.weight
    spec = {"type": "gpt", "vocab_size": V, "n_positions": P, "n_embd": C, "n_layer": L, "n_head": 2,
            "tie_word_embeddings": tied}
    return root, spec


def llama(V, C, I, L, H, KV, tied):
    D = C // H
    layer = lambda: container(
        "LlamaDecoderLayer",
        self_attn=container("LlamaAttention", q_proj=leaf("Linear", weight=[H * D, C]),
                            k_proj=leaf("Linear", weight=[KV * D, C]), v_proj=leaf("Linear", weight=[KV * D, C]),
                            o_proj=leaf("Linear", weight=[C, H * D])),
        mlp=container("LlamaMLP", gate_proj=leaf("Linear", weight=[I, C]), up_proj=leaf("Linear", weight=[I, C]),
                      down_proj=leaf("Linear", weight=[C, I])),
        input_layernorm=leaf("LlamaRMSNorm", weight=[C]), post_attention_layernorm=leaf("LlamaRMSNorm", weight=[C]))
    model = container("LlamaModel", embed_tokens=leaf("Embedding", weight=[V, C]),
                      layers=nn.ModuleList([layer() for _ in range(L)]), norm=leaf("LlamaRMSNorm", weight=[C]))
    root = container("LlamaForCausalLM", model=model, lm_head=leaf("Linear", weight=[V, C]))
    if tied:
        root.lm_head.weight = root.model.embed_tokens.weight
    spec = {"type": "llama", "vocab_size": V, "hidden_size": C, "intermediate_size": I, "num_hidden_layers": L,
            "num_attention_heads": H, "num_key_value_heads": KV, "tie_word_embeddings": tied}
    return root, spec


def accel(mode, spec, options):
    spec = dict(spec, empty_init=True)
    r = subprocess.run([DRIVER, mode, json.dumps(spec), json.dumps(options)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: driver {mode} {spec} {options}: {r.stderr.strip()}")
    return json.loads(r.stdout)


failures = []
cases = 0


def check(what, ours, theirs):
    global cases
    cases += 1
    if ours != theirs:
        if isinstance(ours, dict) and isinstance(theirs, dict):
            ours = {k: v for k, v in ours.items() if theirs.get(k, "absent") != v}
            theirs = {k: v for k, v in theirs.items() if k not in ours or ours[k] != v}
        failures.append(f"{what}: differs\n  accel:      {ours}\n  Accelerate: {theirs}")


def key(k):  # max_memory keys as accel's JSON writes them
    return str(k)


MODELS = [
    ("gpt2 tied", *gpt2(V=50, P=16, C=8, L=3, tied=True), "GPT2Block"),
    ("gpt2 untied", *gpt2(V=50, P=16, C=8, L=3, tied=False), "GPT2Block"),
    ("llama untied", *llama(V=40, C=8, I=20, L=3, H=2, KV=1, tied=False), "LlamaDecoderLayer"),
    ("llama tied", *llama(V=40, C=8, I=20, L=3, H=2, KV=1, tied=True), "LlamaDecoderLayer"),
]
for name, model, spec, block in MODELS:
    # Sizes, with and without a dtype, and the largest layer.
    for dtype in (None, "float16"):
        sizes = compute_module_sizes(model, dtype=dtype)
        plain = dict(sizes)  # (get_max_layer_size reads the defaultdict, adding 0 for a parameter-less lm_head)
        top = list(model.named_parameters(recurse=False)) + list(model.named_children()) + \
            list(model.named_buffers(recurse=False))
        for no_split in ([], [block]):
            size, names = get_max_layer_size(top, sizes, no_split)
            opts = {"no_split_module_classes": no_split}
            if dtype:
                opts["dtype"] = dtype
            ours = accel("sizes", spec, opts)
            check(f"{name} sizes {opts}", ours["sizes"], plain)
            check(f"{name} max layer {opts}", (ours["max_layer_size"], ours["max_layer_names"]), (size, names))
    T = compute_module_sizes(model)[""]
    budgets = [
        {"cpu": 2 * T},                           # everything on the CPU
        {"cpu": int(T * 0.8)},                    # the CPU, then the disk
        {"cpu": int(T * 0.5)},
        {"cpu": int(T * 0.3)},
        {"cpu": int(T * 0.05)},                   # everything on the disk
        {0: int(T * 0.35), "cpu": int(T * 0.4)},  # GPU 0, the CPU, the disk
        {0: int(T * 0.3), 1: int(T * 0.3), "cpu": int(T * 0.25), "disk": 1},
        {0: int(T * 0.6), 1: int(T * 0.6)},
        {0: 0, "cpu": int(T * 0.7)},
    ]
    for budget in budgets:
        for no_split in ([], [block]):
            for dtype in (None, "float16"):
                theirs = infer_auto_device_map(model, max_memory=dict(budget), no_split_module_classes=no_split,
                                               dtype=dtype)
                opts = {"max_memory": {key(k): v for k, v in budget.items()}, "no_split_module_classes": no_split}
                if dtype:
                    opts["dtype"] = dtype
                ours = accel("infer", spec, opts)
                check(f"{name} infer {opts}", ours, {k: v for k, v in theirs.items()})
    # Size texts as Accelerate converts them.
    theirs = infer_auto_device_map(model, max_memory={"cpu": "3KiB"}, no_split_module_classes=[block])
    check(f"{name} infer 3KiB", accel("infer", spec, {"max_memory": {"cpu": "3KiB"},
                                                      "no_split_module_classes": [block]}), theirs)
    # Balanced over two GPUs (transformers' device_map="auto" / "balanced_low_0").
    for low_zero in (False, True):
        for budget in ({0: T, 1: T, "cpu": T}, {0: int(T * 0.4), 1: int(T * 0.4), "cpu": int(T * 0.3)}):
            balanced = get_balanced_memory(model, max_memory=dict(budget), no_split_module_classes=[block],
                                           low_zero=low_zero)
            theirs = infer_auto_device_map(model, max_memory=balanced, no_split_module_classes=[block])
            opts = {"max_memory": {key(k): v for k, v in budget.items()}, "no_split_module_classes": [block],
                    "balanced": True, "low_zero": low_zero}
            check(f"{name} balanced {opts} (Accelerate's budgets {balanced})", accel("infer", spec, opts), theirs)

if failures:
    print("\n".join(failures))
    sys.exit(f"FAIL: {len(failures)} of {cases} comparisons differ")
print(f"OK: {cases} comparisons equal Accelerate 0.24.1's")
