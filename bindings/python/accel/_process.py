"""Accelerate's process decorators on Accelerator: on_main_process, on_local_main_process, on_last_process,
on_process(process_index=...), on_local_process(local_process_index=...). The decorated function runs only
on the chosen process and returns None elsewhere, as in Accelerate."""

import functools


def _only_when(test):
    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            return function(*args, **kwargs) if test() else None
        return wrapper
    return decorate


def install(accelerator_class):
    def on_main_process(self, function):
        return _only_when(self.is_main_process)(function)

    def on_local_main_process(self, function):
        return _only_when(self.is_local_main_process)(function)

    def on_last_process(self, function):
        return _only_when(self.is_last_process)(function)

    def on_process(self, function=None, process_index=None):
        # @acc.on_process(process_index=1) or acc.on_process(f, process_index=1)
        if process_index is None:
            raise ValueError("on_process: process_index is required")
        decorate = _only_when(lambda: self.process_index() == process_index)
        return decorate if function is None else decorate(function)

    def on_local_process(self, function=None, local_process_index=None):
        if local_process_index is None:
            raise ValueError("on_local_process: local_process_index is required")
        decorate = _only_when(lambda: self.local_process_index() == local_process_index)
        return decorate if function is None else decorate(function)

    for f in (on_main_process, on_local_main_process, on_last_process, on_process, on_local_process):
        setattr(accelerator_class, f.__name__, f)
