"""corpus_lengths(): every document's length, read where the corpus lives, counted once and cached."""
import os
import time
from dataclasses import replace

import numpy as np

from corpus.readers.cache import READER_VERSION, HashMemo, LengthCache, check_folder
from corpus.readers.encoders import TokenizerSpec, restore, single_threaded, tokenizer_spec
from corpus.readers.parallel import Progress, cores, local_runner
from corpus.readers.result import assemble
from corpus.readers.settings import Settings
from corpus.readers.sources import sources
from corpus.readers.units import plan
from errors import DataError


def corpus_lengths(paths, tokenizer=None, *, format=None, column=None, label=None, bos="auto", bos_id=None,
                   separator=None, token_dtype=None, cache_dir=None, workers=None, runner=None, progress=True,
                   text_batch=4096):
    """Every document's length (BOS per `bos`) of the corpus at `paths` (files, folders, globs, in order),
    with labels, file and row: a CorpusLengths. One line (DataError) naming the file for bad input.

    tokenizer: for text (see encoders.py: a tokenizers .json, a tiktoken NAME or NAME:RANKFILE, this project's
    tokenizer folder) or a TokenizerSpec. bos: auto | add | none; bos_id: the BOS token id (default: the tokenizer's
    own, where it has one; BOS auto on token data needs it). separator, token_dtype: flat token files.
    cache_dir: where lengths are cached (None: nothing is written, and every input is hashed again).
    workers: units counted at once, by this process and workers - 1 spawned ones (default: the cores; 1: this
    process alone). runner: another engine (fanout/corpus_data.py's Ray Data runner). progress: the bars on
    stderr (SHA256 of new inputs; the pass: documents/s, tokens/s, time left)."""
    spec = tokenizer if isinstance(tokenizer, TokenizerSpec) or tokenizer is None else tokenizer_spec(tokenizer)
    id_from_tokenizer = bos_id is None and spec is not None and spec.bos_id is not None
    if bos_id is None and spec is not None:
        bos_id = spec.bos_id
    settings = Settings(spec, bos, bos_id, column, label, separator, token_dtype, text_batch)
    settings.check()
    if workers is not None and workers < 1:
        raise DataError(f"workers {workers}: must be at least 1")
    if cache_dir is not None:
        check_folder(cache_dir)
    srcs = sources(paths, format)
    names = _label_names(srcs)
    units = [u for i, s in enumerate(srcs) for u in plan(s, i, settings, names[i])]
    _check_needs(units, settings, srcs)
    settings, unused = _tokenizer_used(settings, units, id_from_tokenizer)
    memo = HashMemo(cache_dir)
    key = _key_fields(srcs, units, settings, format, memo, workers or cores(), progress)
    memo.save()
    cache = LengthCache(cache_dir, key)
    hit = cache.final()
    if hit is not None:
        hit.provenance["empty_documents"] = lone_bos(hit.lengths, settings)  # a cache of 2026-12-07 counted 0s only
        hit.message = (f"corpus lengths: {len(hit):,} documents{lone_note(hit, settings)}, {hit.tokens:,} tokens, from "
                       f"the cache {hit.cache_dir} (inputs unchanged: nothing recomputed)" + bos_note(hit.provenance)
                       + unused)
        return hit
    out = _count(units, srcs, settings, cache, key, runner or local_runner(workers or cores()), progress)
    out.message += unused
    return out


def lone_bos(lengths, settings) -> int:
    """Documents with no token but the BOS counted for them (an empty text or token list; none with --bos none)."""
    return int((lengths == 1).sum()) if settings.bos != "none" else int((lengths == 0).sum())


def lone_note(out, settings) -> str:
    n = out.provenance["empty_documents"] if settings.bos != "none" else 0
    return f" ({n:,} of them a lone BOS: no token of their own)" if n else ""


def _tokenizer_used(settings, units, id_from_tokenizer):
    """(settings, note): a tokenizer that counts nothing (the inputs are token data) and gives no BOS id the policy
    needs (one given, or BOS add or none) is left out of the settings, so the provenance and the report do not name
    it as used; the note says so."""
    tok = settings.tokenizer
    if tok is None or any(u.role == "text" for u in units) or (id_from_tokenizer and settings.bos == "auto"):
        return settings, ""
    return replace(settings, tokenizer=None), (f"\nnote: the tokenizer {tok.identity()['ref']} is not used: the "
                                               f"inputs are token data, and the BOS policy needs no id of its")


def _label_names(srcs):
    """Each source's label when no label column applies: its path relative to the sources' common folder (the
    file's name where there is one source, or one folder)."""
    full = [os.path.abspath(s.path) for s in srcs]
    base = os.path.commonpath([os.path.dirname(p) for p in full]) if full else ""
    return [os.path.relpath(p, base) for p in full]


def _check_needs(units, settings, srcs):
    for u in units:
        if u.role == "text" and settings.tokenizer is None:
            raise DataError(f"{srcs[u.source].path}: text ({u.column!r}) is counted by a tokenizer: name one")
        if u.role == "tokens" and settings.bos == "auto" and settings.bos_id is None:
            raise DataError(f"{srcs[u.source].path}: token data under BOS auto needs the BOS id (to see which "
                            f"documents start with one), or BOS add or none")


def _key_fields(srcs, units, settings, fmt, memo, threads, progress):
    """What decides the lengths: the cache key, and the provenance's first part."""
    needs_bin = settings.bos == "auto"  # a Megatron .bin is read only for its documents' first tokens
    wanted = [(f, not (s.fmt == "megatron" and f.endswith(".bin") and not needs_bin)) for s in srcs for f in s.files]
    recs = iter(memo.records(wanted, threads, progress))
    inputs = [{"path": os.path.abspath(s.path), "format": s.fmt, "files": [next(recs) for _ in s.files]}
              for s in srcs]
    parts = {}
    for u in units:
        parts.setdefault(u.source, {"role": u.role, "column": u.column, "label": u.label_column or "file name"})
    return {"reader_version": READER_VERSION, "inputs": inputs, "format": fmt or "detected",
            "columns": [parts.get(i) for i in range(len(srcs))], "column": settings.column, "label": settings.label,
            "tokenizer": settings.tokenizer.identity() if settings.tokenizer else None,
            "bos": {"policy": settings.bos, "id": settings.bos_id}, "separator": settings.separator,
            "token_dtype": settings.token_dtype,
            "units": [[u.source, u.part, list(u.where)] for u in units]}


def _count(units, srcs, settings, cache, key, run, progress):
    t0 = time.perf_counter()
    cache.start()
    results = {i: r for i in range(len(units)) if (r := cache.unit(i)) is not None}
    resumed = len(results)
    todo = [i for i in range(len(units)) if i not in results]
    bar = Progress(sum(units[i].nbytes for i in todo), enabled=progress)
    old = single_threaded()
    try:
        for i, r in run(units, settings, todo):
            if len(results) + 1 < len(units):  # the last unit goes into the whole result, written next
                cache.save_unit(i, r)
            results[i] = r
            bar.add(units[i].nbytes, len(r.lengths), r.tokens)
    finally:
        restore(old)
        bar.close()
    ordered = [results[i] for i in range(len(units))]
    out = assemble(units, ordered, srcs, {})
    if len(out) == 0:
        raise DataError(f"the corpus holds no documents ({', '.join(s.path for s in srcs[:3])}"
                        f"{', ...' if len(srcs) > 3 else ''})")
    seconds = time.perf_counter() - t0
    firsts = [r.bos_first for u, r in zip(units, ordered) if u.role == "tokens"]
    out.provenance = dict(key, documents=len(out), tokens=out.tokens, empty_documents=lone_bos(out.lengths, settings),
                          trailing_pieces=sum(r.trailing for r in ordered), seconds=round(seconds, 3),
                          workers=getattr(run, "workers", None),
                          bos_first=None if not firsts or None in firsts or settings.bos != "auto" else sum(firsts))
    cache.save(out, [int(c) for c in np.bincount(out.doc_file, minlength=len(srcs))])
    out.resumed = resumed
    done = f"{resumed} of {len(units)} parts resumed from the cache; " if resumed else ""
    out.message = (f"corpus lengths: {len(out):,} documents{lone_note(out, settings)}, {out.tokens:,} tokens, "
                   f"counted in {seconds:.1f} s "
                   f"({done}{_where(run)}){f'; cached in {out.cache_dir}' if out.cache_dir else ''}"
                   + bos_note(out.provenance))
    return out


def bos_note(prov) -> str:
    """A note where BOS auto found the BOS id at the start of no document of the token data: most likely the id is
    not this data's (a tokenizer's id given for data made with another), and a BOS was counted for every one."""
    if prov.get("bos_first") != 0:
        return ""
    return (f"\nnote: no document of the token data starts with the BOS id {prov['bos']['id']}, so one was counted "
            "for each; if this data has its BOS at another id, give it with --bos-id (or --bos none if it has none)")


def _where(run):
    w = getattr(run, "workers", None)
    return getattr(run, "engine", None) or (f"{w} worker{'s' if w != 1 else ''}" if w else "")
