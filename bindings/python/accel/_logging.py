"""accel.get_logger (Accelerate's get_logger / MultiProcessAdapter over accel/log.h), and the routing of every
libaccel message, its own warnings included, into Python's ``logging`` (installed when accel is imported).

    logger = accel.get_logger(__name__, log_level="INFO")
    logger.info("epoch %d", epoch)                                   # the main process only
    logger.info("shard ready", main_process_only=False)              # every process
    logger.info("rank done", main_process_only=False, in_order=True, accelerator=acc)  # in rank order
"""

import atexit
import logging
import os
import traceback

from . import core as _core


class PythonLogging(_core.LogCallback):
    """Hands each message to ``logging.getLogger(name)``; with several processes the text starts "[rank<i>] "
    and the record carries ``process_index``."""

    def __init__(self):
        super().__init__()
        self._several = _core.process_count() > 1

    def on_message(self, level, name, process_index, message):
        logger = logging.getLogger(name)
        if logger.isEnabledFor(level):
            prefix = "[rank%d] " % process_index if self._several else ""
            logger.log(level, prefix + message, extra={"process_index": process_index})


_route = None


def route_to_python_logging(enable=True):
    """Send libaccel's messages to Python's logging (the default since import), or back to standard error."""
    global _route
    if enable:
        _route = PythonLogging()  # kept here: the library holds only a pointer to it
        _core.log_set_callback(_route)
    else:
        _core.log_set_callback(None)
        _route = None


def _level_number(level):
    if isinstance(level, int):
        return level
    number = logging.getLevelName(str(level).upper())
    if not isinstance(number, int):
        raise ValueError("log_level: expected DEBUG, INFO, WARNING, ERROR, CRITICAL or a number, got %r" % (level,))
    return number


class MultiProcessAdapter(logging.LoggerAdapter):
    """Accelerate's MultiProcessAdapter: ``log(level, msg, *args, main_process_only=True, in_order=False)``, and
    the usual debug / info / warning / error / critical with the same keywords. ``accelerator`` (here or per
    call) is what in_order synchronises over when there are several processes."""

    def __init__(self, logger, accelerator=None):
        super().__init__(logger, {})
        self.accelerator = accelerator

    def log(self, level, msg, *args, main_process_only=True, in_order=False, accelerator=None, **kwargs):
        text = str(msg) % args if args else str(msg)
        if kwargs.get("exc_info"):
            text += "\n" + traceback.format_exc().rstrip()
        _core.log_write(accelerator or self.accelerator, self.logger.name, int(level), text, main_process_only,
                        in_order)

    def warning_once(self, msg, *args, **kwargs):
        """warning() the first time this text is logged in this process, as Accelerate's warning_once."""
        key = (str(msg), args)
        seen = self.__dict__.setdefault("_warned", set())
        if key not in seen:
            seen.add(key)
            self.warning(msg, *args, **kwargs)


def get_logger(name, log_level=None, accelerator=None):
    """Accelerate's get_logger: a MultiProcessAdapter over ``logging.getLogger(name)``. ``log_level`` (or else
    ACCELERATE_LOG_LEVEL) sets both the Python logger's level and libaccel's threshold."""
    logger = logging.getLogger(name)
    level = log_level if log_level is not None else os.environ.get("ACCELERATE_LOG_LEVEL")
    if level is not None:
        number = _level_number(level)
        logger.setLevel(number)
        logger.root.setLevel(number)  # as Accelerate: the records must also pass the root's level
        _core.log_set_level(number)
    return MultiProcessAdapter(logger, accelerator)


def install():
    route_to_python_logging(True)
    # No Python callback once the interpreter is going away (an accelerator freed at exit may still warn).
    atexit.register(route_to_python_logging, False)
