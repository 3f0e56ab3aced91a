"""A generator run in a forked child process, its items received here one at a time.

The replay's selection core is pure Python and holds the GIL, so the tables, the Proposition
watch and the events file cannot run beside it on a thread. In a child process forked from
this one (so it starts with this process's state: nothing imported again, nothing pickled
on the way in), the core produces its chunks while this process tallies the one before.
Items come back through a pipe of PIPE_BYTES, which holds about two chunks, so memory stays a
few chunks. An exception in the child is raised here, with the child's traceback as a note.
Linux only (fork): elsewhere, or in a daemonic process (which may not have children), the
generator runs here.
"""
import gc
import multiprocessing
import sys
import traceback

try:
    import fcntl  # widening the pipe: Linux (and macOS); the fork itself is used on Linux only
except ImportError:  # Windows
    fcntl = None


def can_fork() -> bool:
    return sys.platform == "linux" and not multiprocessing.current_process().daemon


def forked(make, *args, fork=True):
    """The items of make(*args), produced in a forked child when fork and can_fork(), else here."""
    if not (fork and can_fork()):
        yield from make(*args)
        return
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    _widen(send)
    child = ctx.Process(target=_produce, args=(send, make, args), daemon=True, name="audit-core")
    child.start()
    send.close()
    try:
        while True:
            try:
                kind, item = recv.recv()
            except EOFError:
                child.join()
                raise RuntimeError(f"the forked process running the replay's core ended without a word "
                                   f"(exit code {child.exitcode})") from None
            if kind == "item":
                yield item
            elif kind == "error":
                raise item
            else:
                return
    finally:
        recv.close()
        if child.is_alive():
            child.terminate()
        child.join()


PIPE_BYTES = 1 << 20  # two chunks of the replay (about 450 KB pickled each) fit: the child goes on while this one reads


def _widen(conn):
    """Let the pipe hold PIPE_BYTES (Linux's default 64 KB made the child wait for every read); if refused, as is."""
    try:
        fcntl.fcntl(conn.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_BYTES)
    except (OSError, AttributeError):
        pass


def _produce(send, make, args):
    """In the child: send each item, then the end or the exception that stopped it."""
    gc.freeze()  # what the parent holds stays out of the collector's walks (which would also copy its pages)
    gc.set_threshold(100_000)  # the core's tuples are short-lived and hold no cycles: fewer young collections
    try:
        for item in make(*args):
            send.send(("item", item))
        send.send(("end", None))
    except BaseException as e:  # noqa: B902 - whatever stops the child is the parent's to raise
        note = "in the forked process running the replay's core:\n" + "".join(traceback.format_exc())
        try:
            e.add_note(note)
            send.send(("error", e))
        except Exception:  # an exception that does not pickle: its type and message
            err = RuntimeError(f"{type(e).__name__}: {e}")
            err.add_note(note)
            send.send(("error", err))
    finally:
        send.close()
