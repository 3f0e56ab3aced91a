"""Evaluation: the official metric (official.py), source windows, position bins, bootstrap, rankings, and
the gates before a confirmation pass (rescore.py: every checkpoint's official rows reproduce exactly;
protocols/protocol.py: the frozen protocol). The command line is `python -m eval`."""
