"""The program name a command line's usage line shows: its own."""
import sys
from pathlib import Path


def prog_name(module_form: str) -> str:
    """The console script's name when run as one (packaudit-eval), else how it is run from a checkout
    (`python -m eval`: argparse would show __main__.py)."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return name if name.startswith("packaudit-") else module_form
