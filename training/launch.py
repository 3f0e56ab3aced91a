"""Run torchrun (or any launcher) as a child that leaves no process behind.

subprocess.run's timeout kills only the direct child, and torchrun's ranks run in sessions of
their own: a rank left waiting on a collective outlives its launcher and, holding the output
pipes open, blocks the caller for ever (seen here: a DDP test hung the suite). So the output
goes to files, not pipes, and every process started under the launcher carries a marker in
its environment; whatever still carries it when the launcher ends (or times out) is killed.
"""
import os
import signal
import subprocess
import tempfile
import time
import uuid

MARKER = "PACKAUDIT_LAUNCH"


def _marked(token):
    """pids of the processes whose environment carries the marker (not this one)."""
    needle = f"{MARKER}={token}".encode()
    pids = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(name))
        except OSError:
            pass
    return pids


def _signal_all(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _await_stacks(err, before, limit_s=2.0, quiet_s=0.25):
    """Until the stacks asked for are in err: its size has grown past `before` and then held still for quiet_s
    (faulthandler writes from its signal handler at once), or limit_s has passed (no process printed any)."""
    deadline = time.monotonic() + limit_s
    size, still_since = before, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = os.fstat(err.fileno()).st_size
        if now != size:
            size, still_since = now, time.monotonic()
        elif size > before and time.monotonic() - still_since >= quiet_s:
            return


def run_group(cmd, timeout, env=None, **kw):
    """subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw), except that no
    process started under cmd survives it. On a timeout the processes are first asked for
    their Python stacks (SIGUSR1: train.py prints them to its stderr), then all killed, and
    subprocess.TimeoutExpired carries the captured output, stacks included."""
    token = uuid.uuid4().hex
    env = {**(os.environ if env is None else env), MARKER: token}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, start_new_session=True, env=env, **kw)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            before = os.fstat(err.fileno()).st_size
            _signal_all(_marked(token), signal.SIGUSR1)  # only processes that registered a handler survive it to print
            _await_stacks(err, before)
            _signal_all(_marked(token), signal.SIGKILL)
            p.wait()
            out.seek(0)
            err.seek(0)
            raise subprocess.TimeoutExpired(cmd, timeout, output=out.read(), stderr=err.read()) from None
        except BaseException:  # KeyboardInterrupt
            _signal_all(_marked(token), signal.SIGKILL)
            p.wait()
            raise
        _signal_all(_marked(token), signal.SIGKILL)  # ranks the launcher left behind
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, rc, out.read(), err.read())
