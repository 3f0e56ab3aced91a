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
import math
import re
import tokenize

import numpy as np

from eval.scoring import score_rows

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


def build_sets(texts, labels, enc, bos, context, per_domain=16, seed=3003):
    """{"control": {domain: set}, "selection": {domain: set}}; a set has x, y, docs, sha256 of its texts."""
    out = {"control": {}, "selection": {}}
    for k, (dom, items) in enumerate(sorted(domain_texts(texts, labels).items())):
        x, y, chosen = _windows([t for t, _ in items], enc, bos, context, per_domain, seed + k)
        origin = {t: i for t, i in items}
        entry = {"x": x, "y": y, "docs": sorted({origin[t] for t in chosen}),
                 "sha256": [text_sha256(t) for t in chosen]}
        out["selection" if dom.startswith("sel_") else "control"][dom] = entry
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


def measure(model, sets, token_bytes, device, autocast=False):
    """{domain: BPB} of the model on each domain of `sets` (one part, e.g. sets["control"])."""
    res = {}
    for dom, c in sets.items():
        nats, nbytes, _ = score_rows(model, c["x"], c["y"], token_bytes, [0, c["x"].shape[1]], device, autocast)
        res[dom] = float(nats.sum() / (math.log(2) * nbytes.sum()))
    return res


def rows_bpb(model, x, y, token_bytes, device, autocast=False, batch=64):
    """BPB of the model on given rows (the forward-only screening score)."""
    nats, nb = 0.0, 0
    for a in range(0, len(x), batch):
        n, b, _ = score_rows(model, x[a:a + batch], y[a:a + batch], token_bytes, [0, x.shape[1]], device, autocast)
        nats, nb = nats + float(n.sum()), nb + int(b.sum())
    return nats / (math.log(2) * max(nb, 1))
