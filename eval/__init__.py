"""Evaluation: the official metric, source windows, position bins, bootstrap, rankings."""
