"""One progress-bar helper for every command line.

On a terminal tqdm redraws one line in place. Off a terminal (a log file, CI, `| tee`) each
redraw is a new line of output, so a long job's log filled with bar refreshes: there the
bar prints at most every 30 seconds, plus its start and end.
"""
import sys

from tqdm import tqdm

QUIET_INTERVAL_S = 30


def progress_kwargs(stream=None) -> dict:
    stream = stream or sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream: treat it as a log
        tty = False
    return {} if tty else {"mininterval": QUIET_INTERVAL_S, "maxinterval": QUIET_INTERVAL_S}


def bar(iterable=None, **kw):
    """tqdm with the refresh rate chosen for where stderr (or kw['file']) goes."""
    quiet = progress_kwargs(kw.get("file"))
    for k, v in quiet.items():
        kw.setdefault(k, v)

    class Bar(tqdm):
        def set_postfix(self, ordered_dict=None, refresh=True, **more):
            # tqdm redraws on every postfix change regardless of mininterval; off a terminal, wait for it
            super().set_postfix(ordered_dict, refresh=refresh and not quiet, **more)

    return Bar(iterable, **kw)
