"""A generator run in a forked child process, its items received here one at a time.

The replay's selection core is pure Python and holds the GIL, so the tables, the Proposition
watch and the events file cannot run beside it on a thread. In a child process forked from
this one (so it starts with this process's state: nothing imported again, nothing pickled
on the way in), the core produces its chunks while this process tallies the one before.
Items come back through a pipe, and a thread here moves each to an inbox of INBOX_ITEMS as
soon as it is written, so the child never waits on a full pipe while this process is slow
over one chunk (the paper-scale replay: 0.10-0.15 s of waits); memory stays a few chunks.
An exception in the child is raised here, with the child's traceback as a note. Linux only
(fork): elsewhere, or in a daemonic process (which may not have children), the generator
runs here.

The child cannot outlive the consumer. It inherits this process's signal handlers (ray.init()
installs a SIGTERM handler that raises SystemExit), so it restores the default SIGTERM and
ignores SIGINT (Ctrl-C is this process's to handle) before anything else; it closes its copy of
the pipe's reading end, so a write fails rather than waits once this process is gone; and this
process ends it with terminate(), a bounded join, then kill().
"""
import copy
import gc
import multiprocessing
import queue
import signal
import sys
import threading
import traceback

try:
    import fcntl  # widening the pipe: Linux (and macOS); the fork itself is used on Linux only
except ImportError:  # Windows
    fcntl = None


def can_fork() -> bool:
    return sys.platform == "linux" and not multiprocessing.current_process().daemon


def forked(make, *args, fork=True, wire=None):
    """The items of make(*args), produced in a forked child when fork and can_fork(), else here. wire: a pair
    (to_wire, from_wire) applied to each item in the child before it is sent and here after it is received."""
    if not (fork and can_fork()):
        yield from make(*args)
        return
    to_wire, from_wire = wire or (_same, _same)
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    _widen(send)
    child = ctx.Process(target=_produce, args=(send, recv, make, args, to_wire), daemon=True, name="audit-core")
    child.start()
    send.close()
    inbox, stop = queue.Queue(INBOX_ITEMS), threading.Event()
    reader = threading.Thread(target=_drain, args=(recv, inbox, stop), daemon=True, name="audit-core-reader")
    reader.start()
    try:
        while True:
            kind, item = inbox.get()
            if kind == "item":
                yield from_wire(item)
            elif kind == "error":
                raise item
            elif kind == "eof":
                child.join(timeout=5)  # the pipe ended before the end: the child died (or the stream broke)
                raise RuntimeError(f"the forked process running the replay's core ended without a word "
                                   f"(exit code {child.exitcode})")
            else:
                return
    finally:
        stop.set()
        _end(child)
        if threading.current_thread() is not reader:  # the collector may close this generator on the reader's thread
            reader.join()
        recv.close()


TERM_SECONDS = 2.0  # how long a terminated child may take to go before it is killed


def _end(child):
    """The child gone, whatever it does with SIGTERM (it may not yet have restored the default handler)."""
    if child.is_alive():
        child.terminate()
        child.join(TERM_SECONDS)
    if child.is_alive():
        child.kill()
    child.join()
    child.close()  # its sentinel descriptor


def _same(item):
    return item


INBOX_ITEMS = 8  # messages read ahead of the consumer (about 4.5 MB of the replay's chunks): memory stays a few chunks
POLL_SECONDS = 0.05  # how soon the reader notices that the consumer has stopped


def _drain(recv, inbox, stop):
    """On a thread here: move each message from the pipe to the inbox as soon as it is written, so the child never
    waits on a full pipe while this process tallies a slow chunk (a read lets go of the GIL); ("eof", None) if the
    pipe ends first, or ("error", e) with what stopped this thread (the consumer raises it)."""
    while not stop.is_set():
        try:
            if not recv.poll(POLL_SECONDS):
                continue
            message = recv.recv()
        except (EOFError, OSError):
            message = ("eof", None)
        except BaseException as e:  # noqa: B902 - e.g. MemoryError: the consumer must hear of it, not wait forever
            message = ("error", e)
        while not stop.is_set():
            try:
                inbox.put(message, timeout=POLL_SECONDS)
                break
            except queue.Full:
                continue
        if message[0] != "item":
            return


PIPE_BYTES = 1 << 20  # a whole chunk of the replay (about 560 KB) fits: the child writes it without waiting


def _widen(conn):
    """Let the pipe hold PIPE_BYTES (through Linux's default 64 KB a chunk goes as about nine pipe-fulls, each
    waiting for the reader to be scheduled); if refused, as is."""
    try:
        fcntl.fcntl(conn.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (OSError, AttributeError):
        pass


def _produce(send, recv, make, args, to_wire):
    """In the child: send each item, then the end or the exception that stopped it."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # terminate() ends the child, whatever the parent installed
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches both: the parent decides, then terminates
    recv.close()  # the parent's end: with it closed here, a write to a pipe nobody reads fails instead of waiting
    gc.freeze()  # what the parent holds stays out of the collector's walks (which would also copy its pages)
    gc.set_threshold(100_000)  # the core's tuples are short-lived and hold no cycles: fewer young collections
    try:
        for item in make(*args):
            send.send(("item", to_wire(item)))
        send.send(("end", None))
    except BaseException as e:  # noqa: B902 - whatever stops the child is the parent's to raise
        note = "in the forked process running the replay's core:\n" + "".join(traceback.format_exc())
        try:
            e.add_note(note)
            copy.copy(e)  # rebuilt from its args, as the reader will rebuild it: not every exception class can be
            send.send(("error", e))
        except Exception:  # an exception that does not travel: its type and message
            err = RuntimeError(f"{type(e).__name__}: {e}")
            err.add_note(note)
            send.send(("error", err))
    finally:
        send.close()
