"""The engine a command line asked for: the --engine and --ray-address flags it shares, and open_engine()."""
import contextlib

from errors import DataError
from fanout.engine import Engine
from fanout.local import LocalEngine
from fanout.ray_engine import RayEngine

ENGINES = ("local", "ray")


def add_engine_args(ap, what="tasks"):
    """--engine {local,ray} (argparse refuses any other), --ray-address and --verbose."""
    ap.add_argument("--engine", choices=ENGINES, default="local",
                    help=f"where the {what} run: local (default: on this machine, as before) or ray (a Ray cluster: "
                         "--ray-address or RAY_ADDRESS joins a running one, otherwise a local Ray of its own is started "
                         "and stopped at the end, never one already running here; needs the 'ray' extra)")
    ap.add_argument("--ray-address", default=None, metavar="HOST:PORT",
                    help="with --engine ray: the running cluster to join, the address `ray start --head` prints "
                         "(default: $RAY_ADDRESS), or ray://HOST:10001 for a Ray Client connection")
    ap.add_argument("--verbose", action="store_true",
                    help="with --engine ray: Ray's own log lines (info and up) and the workers' output as Ray "
                         "forwards it (default: Ray's warnings only)")


def check_engine(kind="local", workers=1, address=None):
    """The engine options in one line each, before anything starts: an unknown engine, a Ray address without --engine
    ray, fewer than one worker (a --dry-run checks them too, so that a plan is never printed for a run refused)."""
    if kind not in ENGINES:
        raise DataError(f"--engine {kind}: expected one of {', '.join(ENGINES)}")
    if kind == "local" and address:
        raise DataError(f"--ray-address {address}: applies to --engine ray only")
    if workers is not None and workers < 1:
        raise DataError(f"--workers {workers}: must be at least 1")


@contextlib.contextmanager
def open_engine(kind="local", workers=1, address=None, verbose=False):
    """The engine (an Engine), closed at the end (a Ray started here is stopped). workers: the local engine's
    processes (1: in this process); a Ray takes its cluster's, or this machine's, cores. verbose: Ray's own
    logging and the workers' output (--verbose)."""
    check_engine(kind, workers, address)
    engine: Engine = LocalEngine(workers) if kind == "local" else RayEngine(address, verbose)
    try:
        yield engine
    finally:
        engine.close()
