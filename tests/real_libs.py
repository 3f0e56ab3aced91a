"""The packing code of llm-foundry 0.22.0, LLaMA-Factory 0.9.5 and axolotl 0.19.0, loaded file by file from the
wheels that run.sh installs with --no-deps into .venv/real-libs (requirements-real-libs.lock). Their pins would
move this project's torch, numpy or transformers, and their packages' __init__ files import what is not installed
(llm-foundry's composer and streaming, LLaMA-Factory's peft and trl versions), so nothing is imported as a package:
each file runs under its own dotted name, in the order given, so that the library's imports between these files
find the ones loaded before. The names added to sys.modules (the files and any stand-in) are removed afterwards:
nothing of these libraries is importable outside a load, and the modules returned keep what they imported.

A stand-in is a module of a few attributes for an import the loaded files make but the functions run here never
call; each test file names its stand-ins and says why each is never reached.
"""
import importlib.util
import os
import sys
import types
from pathlib import Path

from conftest import ROOT

# where run.sh installs the lock; PACKAUDIT_REAL_LIBS points elsewhere (a checkout sharing another's .venv)
REAL_LIBS = Path(os.environ.get("PACKAUDIT_REAL_LIBS", ROOT / ".venv" / "real-libs"))


def load(files, stand_ins=None):
    """{dotted name: module} for `files` (paths under REAL_LIBS, importers after what they import); stand_ins:
    {module name: {attribute: value}} present in sys.modules only while the files run."""
    missing = [f for f in files if not (REAL_LIBS / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{REAL_LIBS} lacks {missing[0]}: ./run.sh setup installs requirements-real-libs.lock "
                                "there (or set PACKAUDIT_REAL_LIBS to a folder that has it)")
    added, out = [], {}
    try:
        for name, attrs in (stand_ins or {}).items():
            assert name not in sys.modules, f"{name} is installed: no stand-in needed"
            sys.modules[name] = types.ModuleType(name)
            sys.modules[name].__dict__.update(attrs)
            added.append(name)
        for f in files:
            package = f.endswith("/__init__.py")
            name = (f.rsplit("/", 1)[0] if package else f.removesuffix(".py")).replace("/", ".")
            spec = importlib.util.spec_from_file_location(
                name, REAL_LIBS / f, submodule_search_locations=[str((REAL_LIBS / f).parent)] if package else None)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module  # before it runs: its own relative imports and its importers' find it
            added.append(name)
            spec.loader.exec_module(module)
            out[name] = module
        return out
    finally:
        for name in added:
            sys.modules.pop(name, None)
