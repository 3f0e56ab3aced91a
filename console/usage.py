"""The program name a command line's usage line shows: its own; and the line a Ctrl-C ends it with."""
import shlex
import sys
from pathlib import Path


def prog_name(module_form: str) -> str:
    """The console script's name when run as one (packaudit-eval), else how it is run from a checkout
    (`python -m eval`: argparse would show __main__.py)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.startswith("packaudit-") else module_form


def interrupted_line(module_form: str, argv, kept: str) -> str:
    """What a Ctrl-C leaves (kept) and the command that goes on: the same one again (argv None: this process's)."""
    args = sys.argv[1:] if argv is None else list(argv)
    return f"interrupted: {kept}; rerun `{' '.join([prog_name(module_form), shlex.join(args)]).strip()}` to go on"
