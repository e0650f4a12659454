"""A one-line progress bar for the Python examples (what Accelerate's examples get from tqdm): drawn only by
the main process and only when the output is a terminal (directly, or through `accel launch`, which sets
ACCEL_PROGRESS_TTY=1 when its own output is one), redrawn in place with '\\r'. In a pipe or a log file nothing
is drawn: the examples' own lines are the plain-text log."""

import os
import sys
import time


class Progress:
    def __init__(self, acc):
        self.enabled = acc.is_main_process() and (sys.stdout.isatty() or os.environ.get("ACCEL_PROGRESS_TTY") == "1")
        self.start = time.monotonic()

    def restart(self):
        self.start = time.monotonic()

    def draw(self, label, done, total, items, unit, loss):
        """LABEL [#####.....] done/total  RATE UNIT/s  loss L; `items` were processed since restart()."""
        if not self.enabled:
            return
        filled = 20 * done // total if total else 0
        rate = items / max(time.monotonic() - self.start, 1e-9)
        print("\r%s [%s%s] %d/%d  %.0f %s/s  loss %.4f" % (label, "#" * filled, "." * (20 - filled), done, total, rate,
                                                          unit, loss), end="", flush=True)

    def clear(self):
        """Clears the bar's line, so that the next printed line replaces it."""
        if self.enabled:
            print("\r\033[K", end="", flush=True)
