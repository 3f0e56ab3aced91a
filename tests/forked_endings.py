"""Run as a script by tests/test_audit_stream.py (a process of its own, so the signal handlers it installs and a
child that hangs stay out of the test process): for each way the parent's SIGTERM handler can behave (raising
SystemExit as ray.init()'s does, or ignoring the signal) and each way a consumer can stop (closing early, an exception
while consuming, Ctrl-C), end a forked generator whose child is blocked on a full pipe. Prints one JSON line per
case: seconds the ending took, whether the child is gone, threads and open descriptors left beyond the start."""
import contextlib
import json
import multiprocessing
import os
import signal
import sys
import threading
import time

from audit import forked


def endless(size):
    while True:
        yield bytes(size)


def descriptors():
    return len(os.listdir("/proc/self/fd"))


def stop(way, items):
    """End the consumption the given way; returns when the generator's cleanup is over."""
    if way == "close":
        items.close()
    elif way == "consumer_error":
        try:
            for _ in items:
                raise ValueError("a tally failed")
        except ValueError:
            pass
    else:  # Ctrl-C: SIGINT to the whole process group, as a terminal sends it (the child gets it too), while the
        # consumer works between two items; it holds the generator as the replay does, closed however it stops
        try:
            with contextlib.closing(items):
                os.killpg(os.getpgid(0), signal.SIGINT)
                for _ in items:
                    time.sleep(0.01)
        except KeyboardInterrupt:
            pass


def case(handler, way):
    signal.signal(signal.SIGTERM, handler)
    threads, fds = threading.active_count(), descriptors()
    items = forked.forked(endless, 300_000)
    next(items)
    pid = next(c.pid for c in multiprocessing.active_children() if c.name == "audit-core")
    time.sleep(0.3)  # the reader fills the inbox, the pipe fills behind it: the child is blocked writing
    t0 = time.monotonic()
    stop(way, items)
    del items
    return {"handler": handler_name(handler), "way": way, "seconds": time.monotonic() - t0,
            "child_gone": not os.path.exists(f"/proc/{pid}"),  # ended and reaped
            "threads_left": threading.active_count() - threads, "fds_left": descriptors() - fds}


def raise_exit(signum, frame):
    sys.exit(signum)  # what ray.init() installs in a driver


def handler_name(h):
    return "raise" if h is raise_exit else "ignore"


if __name__ == "__main__":
    for h in (raise_exit, signal.SIG_IGN):
        for w in ("close", "consumer_error", "ctrl_c"):
            print(json.dumps(case(h, w)), flush=True)
