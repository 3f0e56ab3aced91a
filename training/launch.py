"""Run torchrun (or any launcher) as a child whose whole process group ends with it.

subprocess.run's timeout kills only the direct child: torchrun's worker processes would be
left behind, waiting forever on a collective (seen here: a timed-out DDP test left a rank
asleep for hours). The launcher gets a session of its own, and on a timeout or an
interruption the whole group is killed before the error propagates.
"""
import os
import signal
import subprocess


def run_group(cmd, timeout, **kw):
    """subprocess.run(cmd, capture_output=True, text=True, **kw) in a new process group;
    raises subprocess.TimeoutExpired after killing every process of the group."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw)
    try:
        out, err = p.communicate(timeout=timeout)
    except BaseException:  # TimeoutExpired, KeyboardInterrupt: no rank may outlive its launcher
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.communicate()
        raise
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)
