"""Corpus preparation: the offline corpus, ClimbMix download, tokenizer, token files, census.

prepare.py is the command line; each step lives in its own module here so tests and
later stages import one thing at a time.
"""
