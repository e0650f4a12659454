"""accel: Hugging Face Accelerate's training loop over libaccel's C API (SWIG bindings).

    import accel
    acc = accel.Accelerator('{"gradient_accumulation_steps": 2}')
    model = accel.Model.from_json('{"type": "mlp", "widths": [16, 64, 4]}')
    opt = accel.Optimizer(model, '{"type": "adamw", "lr": 3e-3}')
    dl = accel.DataLoader(accel.tensor(x), accel.tensor(y), '{"batch_size": 64, "shuffle": true}')
    acc.prepare(model, opt, dl)
    for batch in dl:   # train_step enters accumulate(model) itself
        loss = acc.train_step(model, opt, None, batch, "cross_entropy")
    for batch in dl:   # or by hand
        with acc.accumulate(model):
            loss = accel.compute_loss("cross_entropy", model.forward(batch.inputs()), batch.labels())
            acc.backward(loss)
            opt.step()
            opt.zero_grad()

Failures raise accel.AccelError subclasses (accel.errors). Objects free their handle when garbage
collected, on close(), or at the end of a ``with`` block. The GIL is released during every library call.
"""

from . import core as _core
from .errors import *  # noqa: F401,F403
from .errors import AccelError, error_class

if _core.abi_version() != _core.BUILT_ABI_VERSION:
    raise ImportError(
        "accel: the loaded libaccel has ABI version %d but these bindings were built for ABI %d "
        "(libaccel.so.%d); rebuild the bindings or install the matching library"
        % (_core.abi_version(), _core.BUILT_ABI_VERSION, _core.BUILT_ABI_VERSION))

from .core import (  # noqa: E402
    Accelerator, Batch, Collate, DataLoader, IterableDataset, MapDataset, Model, Optimizer, Sample, SampleList,
    Scheduler, StateDictEntries, Tensor, TrackerCallback, LogCallback, log_get_level, log_set_level, log_write,
    abi_version, build_info_json, compute_loss, dtype_size, merge_weights, process_count, process_index,
    process_is_local_main, process_is_main, process_local_count, process_local_index, set_seed, status_name,
    version_number, version_string,
)
from .core import (  # noqa: E402
    ACCEL_DTYPE_FLOAT32 as FLOAT32, ACCEL_DTYPE_FLOAT64 as FLOAT64, ACCEL_DTYPE_FLOAT16 as FLOAT16,
    ACCEL_DTYPE_BFLOAT16 as BFLOAT16, ACCEL_DTYPE_INT8 as INT8, ACCEL_DTYPE_UINT8 as UINT8,
    ACCEL_DTYPE_INT16 as INT16, ACCEL_DTYPE_INT32 as INT32, ACCEL_DTYPE_INT64 as INT64,
    ACCEL_DTYPE_BOOL as BOOL,
    ACCEL_TRACKER_EVENT_INIT as TRACKER_EVENT_INIT, ACCEL_TRACKER_EVENT_LOG as TRACKER_EVENT_LOG,
    ACCEL_TRACKER_EVENT_FINISH as TRACKER_EVENT_FINISH,
)
from .core import StateHook  # noqa: E402  (save_state / load_state pre-hooks)
from .core import find_executable_batch_size  # noqa: E402  (accel/memory.h)
from ._tensor import install as _install_tensor_helpers, tensor  # noqa: E402

_install_tensor_helpers(Tensor, Model)
from ._process import install as _install_process_decorators  # noqa: E402

_install_process_decorators(Accelerator)
from ._datasets import install as _install_datasets  # noqa: E402

_install_datasets(DataLoader)
from ._logging import MultiProcessAdapter, get_logger, install as _install_logging, route_to_python_logging  # noqa: E402,E501

_install_logging()

__version__ = version_string()
__all__ = [
    "Accelerator", "Batch", "Collate", "DataLoader", "IterableDataset", "MapDataset", "Model", "Optimizer", "Sample",
    "SampleList", "Scheduler", "Tensor", "TrackerCallback", "tensor",
    "abi_version", "build_info_json", "compute_loss", "dtype_size", "merge_weights", "process_count", "process_index",
    "process_is_local_main", "process_is_main", "process_local_count", "process_local_index", "set_seed",
    "status_name", "version_number", "version_string",
    "FLOAT32", "FLOAT64", "FLOAT16", "BFLOAT16", "INT8", "UINT8", "INT16", "INT32", "INT64", "BOOL",
    "TRACKER_EVENT_INIT", "TRACKER_EVENT_LOG", "TRACKER_EVENT_FINISH",
    "LogCallback", "MultiProcessAdapter", "get_logger", "log_get_level", "log_set_level", "log_write",
    "route_to_python_logging",
    "AccelError", "error_class",
] + [n for n in dir() if n.endswith("Error") and n != "AccelError"]
