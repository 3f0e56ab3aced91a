"""Control and selection sets: fixed held-out windows per named domain, and BPB on them.

All domains are defined here, in one place, from the validation split (never from the
training pool), each by a deterministic rule:

offline corpus (this Python's standard library)
  control   library_code     beginning window of library-module documents
            test_code        beginning window of test-suite documents
            reference_prose  windows of the pydoc topic texts (the language reference)
            docstrings       docstrings of library code, as English prose
            comments         `#` comments of library and test code, joined per document
  selection sel_library, sel_test, sel_prose: the same registers, other documents
            (and for prose, other topics), used only by the success rule, never by a rejection
ClimbMix (no source column): every validation document gets a register from `register_of`
  (code / question-answer / non-Latin script / English prose); one control and one
  selection domain per register, from disjoint documents.

Every window is BOS + the first `context` tokens of its text; a domain's BPB is the ratio
of summed nats to summed bytes over its windows (positive-byte mask, as the official metric).
"""
import ast
import hashlib
import io
import json
import math
import re
import tokenize
from pathlib import Path

import numpy as np

from errors import DataError
from eval.official import score_fixed_shape
from training.device import bf16_autocast

CONTROL = ("library_code", "test_code", "reference_prose", "docstrings", "comments")
SELECTION = ("sel_library", "sel_test", "sel_prose")


def text_sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def docstrings_of(text):
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return ""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            d = ast.get_docstring(node)
            if d and len(d) > 40:
                out.append(d)
    return "\n\n".join(out)


def comments_of(text):
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT and len(tok.string) > 3:
                out.append(tok.string.lstrip("#").strip())
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return "\n".join(out)


_CODE = re.compile(r"^\s*(def |class |import |from \S+ import|return\b|if .*:$|for .*:$|[{}();]\s*$|#include|function\b)")


def register_of(text):
    """code | qa | non_latin | prose: a deterministic register/script rule for unlabeled text."""
    letters = [c for c in text[:4000] if c.isalpha()]
    if letters and sum(ord(c) > 0x24F for c in letters) / len(letters) > 0.3:
        return "non_latin"
    lines = [ln for ln in text[:4000].splitlines() if ln.strip()]
    if lines and sum(bool(_CODE.match(ln)) for ln in lines) / len(lines) > 0.2:
        return "code"
    if re.search(r"(^|\n)\s*(Q:|Question:|A:|Answer:)", text[:4000]) or text[:4000].count("?") >= 3:
        return "qa"
    return "prose"


def _windows(texts, enc, bos, context, n, seed):
    """Up to n windows from texts (seeded pick), each BOS + first `context` tokens."""
    texts = [t for t in texts if t.strip()]
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(texts), size=min(n, len(texts)), replace=False).tolist()) if texts else []
    x = np.zeros((len(pick), context), dtype=np.int64)
    y = np.full((len(pick), context), -1, dtype=np.int64)
    for r, i in enumerate(pick):
        doc = np.asarray([bos] + enc.encode_ordinary(texts[i])[:context], dtype=np.int64)
        x[r, : len(doc) - 1] = doc[:-1]
        y[r, : len(doc) - 1] = doc[1:]
    return x, y, [texts[i] for i in pick]


def _prose_pieces(text, chars=1500):
    """A long reference text cut at paragraph boundaries into pieces of about `chars`."""
    out, cur = [], ""
    for para in text.split("\n\n"):
        cur += para + "\n\n"
        if len(cur) >= chars:
            out.append(cur)
            cur = ""
    if cur.strip():
        out.append(cur)
    return out


def domain_texts(texts, labels):
    """{domain: [(text, origin_doc_index)]} for control and selection, from validation documents.

    Documents are split between control and selection by their index parity (even: control,
    odd: selection), so the two sets never share a document.
    """
    dom = {d: [] for d in CONTROL + SELECTION}
    labelled = set(labels) >= {"library", "test"}
    for i, (t, lab) in enumerate(zip(texts, labels)):
        ctrl = i % 2 == 0
        if not labelled:
            reg = register_of(t)
            dom.setdefault(("" if ctrl else "sel_") + reg, []).append((t, i))
            continue
        if lab == "library":
            dom["library_code" if ctrl else "sel_library"].append((t, i))
            if ctrl:
                dom["docstrings"].append((docstrings_of(t), i))
                dom["comments"].append((comments_of(t), i))
        elif lab == "test":
            dom["test_code" if ctrl else "sel_test"].append((t, i))
            if ctrl:
                dom["comments"].append((comments_of(t), i))
        elif lab == "prose":
            for p in _prose_pieces(t):
                dom["reference_prose" if ctrl else "sel_prose"].append((p, i))
    return {d: [(t, i) for t, i in v if t.strip()] for d, v in dom.items() if any(t.strip() for t, _ in v)}


RULE_KEYS = {"labels", "registers", "match", "documents", "extract"}
EXTRACT = {"text": lambda t: [t], "docstrings": lambda t: [docstrings_of(t)], "comments": lambda t: [comments_of(t)],
           "paragraphs": lambda t: _prose_pieces(t)}


def load_domains(path):
    """A domains file, checked: {"control": {name: rule}, "selection": {name: rule}}.

    A rule chooses validation documents: `labels` (source labels), `registers` (register_of:
    code, qa, non_latin, prose), `match` (a regular expression searched in the text), all
    optional and combined with "and"; `documents` even | odd | all (by index, default even
    for control and odd for selection, so the two never share a document); `extract` text |
    docstrings | comments | paragraphs (what of a document becomes window text, default text)."""
    p = Path(path)
    try:
        spec = json.loads(p.read_text())
    except FileNotFoundError:
        raise DataError(f"{p}: domains file not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise DataError(f"{p}: not valid JSON ({e})") from None
    if not isinstance(spec, dict) or not isinstance(spec.get("control"), dict) or not spec["control"] \
            or set(spec) - {"control", "selection"}:
        raise DataError(f"{p}: must be an object with a non-empty \"control\" object and optionally \"selection\"")
    seen = set()
    for part, doms in spec.items():
        if not isinstance(doms, dict):
            raise DataError(f"{p}: \"{part}\" must map domain names to rules")
        for name, rule in doms.items():
            if name in seen:
                raise DataError(f"{p}: domain {name!r} is named twice")
            seen.add(name)
            if not isinstance(rule, dict) or set(rule) - RULE_KEYS:
                raise DataError(f"{p}: {part} domain {name!r}: a rule is an object with keys among "
                                f"{', '.join(sorted(RULE_KEYS))}")
            for key in ("labels", "registers"):  # a string would be matched as a substring ("l" in "legal")
                v = rule.get(key, [])
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    raise DataError(f"{p}: {part} domain {name!r}: {key} must be a list of strings "
                                    f"(got {json.dumps(v)})")
            if rule.get("documents", "even") not in ("even", "odd", "all"):
                raise DataError(f"{p}: {part} domain {name!r}: documents must be even, odd or all")
            if rule.get("extract", "text") not in EXTRACT:
                raise DataError(f"{p}: {part} domain {name!r}: extract must be one of {', '.join(EXTRACT)}")
            if "match" in rule:
                try:
                    re.compile(rule["match"])
                except re.error as e:
                    raise DataError(f"{p}: {part} domain {name!r}: match is not a regular expression ({e})") from None
    return spec


def spec_domain_texts(texts, labels, spec):
    """{part: {domain: [(text, origin_doc_index)]}} chosen by a domains file's rules (load_domains)."""
    out = {"control": {}, "selection": {}}
    for part, doms in spec.items():
        for name, rule in doms.items():
            parity = rule.get("documents", "even" if part == "control" else "odd")
            pat = re.compile(rule["match"]) if "match" in rule else None
            items = []
            for i, (t, lab) in enumerate(zip(texts, labels)):
                if (parity == "even" and i % 2) or (parity == "odd" and not i % 2):
                    continue
                if "labels" in rule and lab not in rule["labels"]:
                    continue
                if "registers" in rule and register_of(t) not in rule["registers"]:
                    continue
                if pat is not None and not pat.search(t):
                    continue
                items += [(x, i) for x in EXTRACT[rule.get("extract", "text")](t) if x.strip()]
            if not items:
                raise DataError(f"domains file: {part} domain {name!r} matches no validation document")
            out[part][name] = items
    return out


def build_sets(texts, labels, enc, bos, context, per_domain=16, seed=3003, spec=None):
    """{"control": {domain: set}, "selection": {domain: set}}; a set has x, y, docs, sha256 of its texts.

    spec: a domains file's rules (load_domains); without one, the built-in domains above."""
    if spec is None:
        parts = {"control": {}, "selection": {}}
        for dom, items in domain_texts(texts, labels).items():
            parts["selection" if dom.startswith("sel_") else "control"][dom] = items
    else:
        parts = spec_domain_texts(texts, labels, spec)
    out = {"control": {}, "selection": {}}
    part_of = {d: p for p in parts for d in parts[p]}
    for k, dom in enumerate(sorted(part_of)):  # each domain's window seed: its rank among all names
        part, items = part_of[dom], parts[part_of[dom]][dom]
        x, y, chosen = _windows([t for t, _ in items], enc, bos, context, per_domain, seed + k)
        origin = {t: i for t, i in items}
        out[part][dom] = {"x": x, "y": y, "docs": sorted({origin[t] for t in chosen}),
                          "sha256": [text_sha256(t) for t in chosen]}
    shared = set(i for s in out["control"].values() for i in s["docs"]) & \
        set(i for s in out["selection"].values() for i in s["docs"])
    if shared:
        raise DataError(f"domains: control and selection windows share {len(shared)} validation document(s) "
                        f"(first: {min(shared)}); give them disjoint documents (even / odd)")
    return out


def used_documents(sets):
    """Validation document indices any control or selection window came from."""
    return sorted({i for part in sets.values() for s in part.values() for i in s["docs"]})


def ngram_hashes(tokens, n=13):
    """uint64 polynomial hashes of every n-gram of a token array (wrapping arithmetic)."""
    t = np.asarray(tokens, dtype=np.uint64)
    if len(t) < n:
        return np.zeros(0, dtype=np.uint64)
    h = np.zeros(len(t) - n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(n):
            h = h * np.uint64(1000003) + t[j:len(t) - n + 1 + j]
    return h


def overlap_rate(sets, pool_hashes, n=13):
    """{domain: share of the domain's n-grams (windows' targets) that also occur in the pool}."""
    res = {}
    for part in sets.values():
        for dom, s in part.items():
            hs = np.concatenate([ngram_hashes(row[row >= 0], n) for row in s["y"]])
            res[dom] = float(np.isin(hs, pool_hashes).mean()) if len(hs) else 0.0
    return res


def sample_docs(stream, docs, max_tokens, seed=0):
    """A seeded sample of `docs` (kept in their order) holding about max_tokens tokens; all when they fit."""
    docs = list(docs)
    if max_tokens is None or int(np.asarray(stream.lengths)[docs].sum()) <= max_tokens:
        return docs
    keep, t = set(), 0
    for j in np.random.default_rng(seed).permutation(len(docs)).tolist():
        if t >= max_tokens:
            break
        keep.add(j)
        t += int(stream.lengths[docs[j]])
    return [d for j, d in enumerate(docs) if j in keep]


OVERLAP_SAMPLE_TOKENS = 4_000_000  # per shard: the 13-gram overlap check reads a sample, not every shard whole


def sampled_overlap(sets, stream, doc_lists, max_tokens=OVERLAP_SAMPLE_TOKENS, n=13, chunk_tokens=1 << 20, seed=0):
    """({domain: share of its n-grams found in the sampled documents}, tokens read, tokens in all lists).

    Each list (a shard's documents) contributes a seeded sample of about max_tokens tokens,
    hashed a chunk of about chunk_tokens consecutive tokens at a time: memory is bounded by the
    chunk, not the pool. Only the sets' own n-grams are kept, marked when seen. With every
    document read this equals overlap_rate over the same documents' n-grams."""
    dom = [(d, np.concatenate([ngram_hashes(row[row >= 0], n) for row in s["y"]]) if len(s["y"]) else np.zeros(0, np.uint64))
           for part in sets.values() for d, s in part.items()]
    seen = [np.zeros(len(h), dtype=bool) for _, h in dom]
    read = total = 0

    def flush(buf):
        hs = np.unique(ngram_hashes(np.concatenate(buf), n))
        for k, (_, h) in enumerate(dom):
            seen[k] |= np.isin(h, hs)

    for k, docs in enumerate(doc_lists):
        total += int(np.asarray(stream.lengths)[list(docs)].sum()) if len(docs) else 0
        buf, got = [], 0
        for i in sample_docs(stream, docs, max_tokens, seed + k):
            buf.append(np.asarray(stream.doc_tokens(i), dtype=np.int64))
            got += len(buf[-1])
            read += len(buf[-1])
            if got >= chunk_tokens:
                flush(buf)
                buf, got = [buf[-1][-(n - 1):]], 0  # keep n-1 tokens so no n-gram is lost at the cut
        if buf and got:
            flush(buf)
    return {d: (float(s.mean()) if len(s) else 0.0) for (d, _), s in zip(dom, seen)}, read, total


def measure(model, sets, token_bytes, device, autocast=None, fixed_rows=None):
    """{domain: BPB} of the model on each domain of `sets` (one part, e.g. sets["control"]).
    autocast None: train.py's policy for the device (bf16 on CUDA). fixed_rows None: a domain in
    one forward; else every forward takes exactly fixed_rows rows (the last padded with masked
    targets), so a compiled model sees one shape whatever a domain's size."""
    autocast = bf16_autocast(device) if autocast is None else autocast
    res = {}
    for dom, c in sets.items():
        x, y = c["x"], c["y"]
        step = fixed_rows or max(len(x), 1)
        parts = [score_fixed_shape(model, x[a:a + step], y[a:a + step], token_bytes, [0, x.shape[1]], device, autocast,
                                   fixed_rows) for a in range(0, max(len(x), 1), step)]
        nats, nbytes = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
        res[dom] = float(nats.sum() / (math.log(2) * nbytes.sum()))
    return res


def rows_bpb(model, x, y, token_bytes, device, autocast=None, batch=64, fixed_rows=None):
    """BPB of the model on given rows (the forward-only screening score); autocast as measure.
    fixed_rows: every forward takes exactly that many rows (instead of `batch`, the last padded)."""
    autocast = bf16_autocast(device) if autocast is None else autocast
    batch = fixed_rows or batch
    nats, nb = 0.0, 0
    for a in range(0, len(x), batch):
        n, b, _ = score_fixed_shape(model, np.asarray(x[a:a + batch]), np.asarray(y[a:a + batch]), token_bytes,
                                    [0, x.shape[1]], device, autocast, fixed_rows)
        nats, nb = nats + float(n.sum()), nb + int(b.sum())
    return nats / (math.log(2) * max(nb, 1))
