"""One progress-bar helper for every command line.

On a terminal tqdm redraws one line in place. Off a terminal (a log file, CI, `| tee`) each
redraw is a new line of output, so a long job's log filled with bar refreshes: there the
bar prints at most every 30 seconds, plus its start and end.
"""
import sys

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
    from tqdm import tqdm

    for k, v in progress_kwargs(kw.get("file")).items():
        kw.setdefault(k, v)
    return tqdm(iterable, **kw)
