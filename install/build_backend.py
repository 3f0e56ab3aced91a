"""The build backend: setuptools', except that it builds no installable (non-editable) wheel.

This checkout's top-level modules and packages have short, common names (main, train, prepare,
eval, audit, training, corpus, ...). Installed into site-packages they would shadow other
projects' modules of those names, or be shadowed by them. So `pip install .` and `pip wheel .`
are refused with one line, and `pip install -e .` (an editable install: the checkout stays where
the code is read from, inside a virtualenv of its own) and source distributions are built as
setuptools builds them. pyproject.toml names this file (build-backend, backend-path).
"""
from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403 - every hook not overridden below is setuptools' own

REFUSAL = ("packing-audit installs only as an editable checkout (pip install -e . in a virtualenv of its own, or "
           "./run.sh): its top-level names (main, train, prepare, eval, audit, training, ...) would shadow other "
           "projects in site-packages")


def _refuse(*args, **kwargs):
    raise SystemExit(f"error: {REFUSAL}")


get_requires_for_build_wheel = prepare_metadata_for_build_wheel = build_wheel = _refuse
build_editable = _setuptools.build_editable
