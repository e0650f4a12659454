"""Datasets from Python code: DataLoader.from_dataset(obj, config) over any map-style object (``__len__`` and
``__getitem__``) or iterable (``__iter__``), as PyTorch's DataLoader takes them.

A sample is ``inputs`` or ``(inputs, labels)``; each may be an accel.Tensor, a numpy array, a buffer or a nested
list (see accel.tensor). An iterable with ``state_dict()`` / ``load_state_dict(d)`` (torchdata's Stateful, d
JSON-serialisable) is resumed exactly by Accelerator.load_state; ``set_epoch(e)`` is called before each pass
when it exists. ``collate(samples)`` gets a list of ``(inputs, labels or None)`` accel.Tensor pairs and returns
``inputs``, ``(inputs, labels)`` or ``(inputs, labels, attention_mask)``.

Threads: with "num_workers" > 0, ``__getitem__`` and the collate run on the loader's worker threads (each call
holds the GIL, so Python code itself does not run in parallel; time spent without the GIL - I/O, sleeping,
numpy - overlaps). Exceptions raised there fail ``next_batch()`` (and the ``for`` loop) with their message.
"""

import json

from . import core as _core
from ._tensor import tensor


def _fill(sample, item, what):
    if isinstance(item, tuple):
        if len(item) not in (1, 2, 3):
            raise ValueError("%s: expected inputs or a tuple (inputs, labels[, attention_mask]), got %d items"
                             % (what, len(item)))
        inputs, labels, mask = (tuple(item) + (None, None))[:3]
    else:
        inputs, labels, mask = item, None, None
    if inputs is None:
        raise ValueError("%s: no inputs" % what)
    sample.set_inputs(tensor(inputs))
    if labels is not None:
        sample.set_labels(tensor(labels))
    if mask is not None:
        sample.set_attention_mask(tensor(mask))


class _Map(_core.MapDataset):
    def __init__(self, dataset):
        super().__init__()
        self._dataset = dataset

    def length(self):
        return len(self._dataset)

    def get(self, index, sample):
        _fill(sample, self._dataset[index], "dataset[%d]" % index)


class _Iterable(_core.IterableDataset):
    def __init__(self, dataset):
        super().__init__()
        self._dataset = dataset
        self._it = None

    def set_epoch(self, epoch):
        if hasattr(self._dataset, "set_epoch"):
            self._dataset.set_epoch(epoch)
        self._it = None  # iter() at the first next(): after a load_state

    def next(self, sample):
        if self._it is None:
            self._it = iter(self._dataset)
        try:
            item = next(self._it)
        except StopIteration:
            return False
        _fill(sample, item, "next(dataset)")
        return True

    def stateful(self):
        return callable(getattr(self._dataset, "state_dict", None)) and \
            callable(getattr(self._dataset, "load_state_dict", None))

    def state(self):
        return json.dumps(self._dataset.state_dict())

    def load_state(self, state):
        self._dataset.load_state_dict(json.loads(state))
        self._it = None


class _Collate(_core.Collate):
    def __init__(self, fn):
        super().__init__()
        self._fn = fn

    def collate(self, samples, batch):
        items = [(samples.inputs(i), samples.labels(i)) for i in range(samples.size())]
        _fill(batch, self._fn(items), "collate")


def _from_dataset(dataset, config_json=None, collate=None):
    """A DataLoader over a Python dataset: map-style (len + indexing) or iterable; see accel._datasets."""
    adapters = []
    c = None
    if collate is not None:
        c = collate if isinstance(collate, _core.Collate) else _Collate(collate)
        adapters.append(c)
    if isinstance(dataset, _core.MapDataset):
        d, dl = dataset, _core.DataLoader.from_map_dataset(dataset, config_json, c)
    elif isinstance(dataset, _core.IterableDataset):
        d, dl = dataset, _core.DataLoader.from_iterable_dataset(dataset, config_json, c)
    elif hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__"):
        d = _Map(dataset)
        dl = _core.DataLoader.from_map_dataset(d, config_json, c)
    elif hasattr(dataset, "__iter__"):
        d = _Iterable(dataset)
        dl = _core.DataLoader.from_iterable_dataset(d, config_json, c)
    else:
        raise TypeError("from_dataset: expected a map-style dataset (__len__, __getitem__) or an iterable")
    adapters.append(d)
    dl._accel_datasets = adapters  # the library only borrows them
    return dl


def install(DataLoader):
    DataLoader.from_dataset = staticmethod(_from_dataset)
