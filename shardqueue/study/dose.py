"""Dose-response: do domain losses distinguish individual shards reliably?

From the calibrated state, for each harmful fraction f in (0, 10, 25, 50, 100%) and each
of `trials` ordinary pool shards, a dose shard of exactly the ordinary shard's size is
built whose first round(f * size) targets are harmful and the rest clean (exact_mix); it
is trained whole, measured, judged by the calibrated rule, then one clean recovery shard
(the next pool shard) is trained and the recovery criterion applied. Every trial starts
from the same calibrated state: model, optimizer moments and step, each restored from a
deep copy, so no trial inherits another's momentum. Output: dose.json and dose.md (flag
and rejection rate per fraction, the realised harmful share, the mean largest rise in
units of the threshold).

The harm (`harm`): `cipher` (harmful.py, a corrupted token mapping), a text-level damage
kind of damage.py (the shard's own documents damaged and re-tokenized), or `parquet`:
a user's own parquet of bad documents (`harm_parquet`, its `text` column). Each trial
draws the file's documents in its own seeded random order (the same order at every
fraction of that trial, so a larger dose adds documents to a smaller one), never
repeating one; a file with fewer tokens than the largest dose needs is refused before
anything is trained.
"""
import copy
import hashlib
import random
import sys
from pathlib import Path

import numpy as np

from console.progress import bar as progress_bar
from corpus.atomic import atomic_write_json, atomic_write_text
from corpus.shards import iter_row_group_texts
from errors import DataError
from shardqueue.calibration import calibrated_state, open_calibration
from shardqueue.engine.packing import shard_rows, shard_tokens
from shardqueue.engine.training import one_thread, train_rows
from shardqueue.policy.rule import judge
from shardqueue.world.damage import DAMAGES
from shardqueue.world.domains import measure as measure_control
from shardqueue.world.harmful import remapped
from shardqueue.world.rotation import shard_docs
from training.trainer import Trainer

FRACTIONS = (0.0, 0.1, 0.25, 0.5, 1.0)


def take_tokens(docs, n):
    """(the first n tokens of the documents in order, documents touched); a cut document keeps its start."""
    out, got, used = [], 0, 0
    for d in docs:
        if got >= n:
            break
        d = np.asarray(d, dtype=np.int64)[: n - got]
        out.append(d)
        got += len(d)
        used += 1
    if got < n:
        raise DataError(f"not enough documents for a dose shard: {got} of {n} tokens")
    return (np.concatenate(out) if out else np.zeros(0, dtype=np.int64)), used


def exact_mix(harm_docs, clean_docs, total, fraction):
    """(tokens, harmful targets): exactly `total` tokens, the first round(fraction * total) from
    harm_docs, the rest from clean_docs. Every token of a shard is a target (packing.py), so the
    harmful share of targets is exactly harmful / total."""
    n_harm = int(round(fraction * total))
    h, _ = take_tokens(harm_docs, n_harm)
    c, _ = take_tokens(clean_docs, total - n_harm)
    return np.concatenate([h, c]), n_harm


def check_harm(kind, harm_parquet=None):
    """A harm the dose command can apply, else one line: run_queue.py checks it before making the --out folder."""
    if kind == "cipher":
        return
    if kind == "parquet":
        if not harm_parquet:
            raise DataError("--harm parquet needs --harm-parquet PATH (a parquet file with a text column)")
        if not Path(harm_parquet).is_file():
            raise DataError(f"{harm_parquet}: file not found (--harm-parquet)")
        return
    if kind not in DAMAGES:
        raise DataError(f"--harm {kind!r}: not one of cipher, parquet, {', '.join(sorted(DAMAGES))}")


def harm_function(kind, world, seed, vocab, harm_parquet=None):
    """(tokens, rng) -> a harmful document's tokens; for `parquet`, the list of the bad documents' tokens."""
    check_harm(kind, harm_parquet)
    if kind == "cipher":
        perm = np.random.default_rng(seed).permutation(vocab)
        return lambda t, rng: remapped(t, perm, world.bos)
    if kind == "parquet":
        texts = [t for _, batch in iter_row_group_texts(harm_parquet) for t in batch if t.strip()]
        if not texts:
            raise DataError(f"{harm_parquet}: no non-empty documents")
        return [np.asarray([world.bos] + world.enc.encode_ordinary(t), dtype=np.int64) for t in texts]
    fn = DAMAGES[kind]

    def text_damage(t, rng):
        text = world.enc.decode([int(x) for x in t[1:]])
        return np.asarray([world.bos] + world.enc.encode_ordinary(fn(text, rng)), dtype=np.int64)

    return text_damage


def trial_order(n_docs, seed, trial):
    """The order in which one trial draws the file's bad documents: a permutation seeded by (seed, trial)."""
    return np.random.default_rng([seed, 29, trial]).permutation(n_docs).tolist()


def check_file_size(docs, totals, fractions, path):
    """A DataError naming the file when its documents cannot fill the largest dose of some trial shard."""
    have = int(sum(len(d) for d in docs))
    need, total = max((int(round(max(fractions) * t)), t) for t in totals)
    if have < need:
        raise DataError(f"{path}: its documents hold {have} tokens, but a dose of {max(fractions):.0%} of a "
                        f"{total}-token shard needs {need} (documents are never repeated); give a larger file "
                        f"or fewer or smaller doses")


def dose_response(out, calibration_dir, trials=4, fractions=FRACTIONS, device="cpu", log=print, harm="cipher",
                  harm_parquet=None):
    with one_thread():
        return _dose(out, calibration_dir, trials, fractions, device, log, harm, harm_parquet)


def _dose(out, calibration_dir, trials, fractions, device, log, harm, harm_parquet):
    out = Path(out)
    cfg, world, pool, calib = open_calibration(calibration_dir, device)
    shards = {s["id"]: s for s in pool["shards"]}
    clean = [s for s in pool["order"] if not shards[s]["sources"].get(pool["harmful"]["label"])]
    if len(clean) < trials + 2:
        raise DataError(f"the pool has {len(clean)} ordinary shards; {trials + 2} needed")
    damage = harm_function(harm, world, pool["seed"] + 7, world.vocab, harm_parquet)
    if isinstance(damage, list):
        check_file_size(damage, [shards[clean[j]]["tokens"] for j in range(trials)], fractions, harm_parquet)
    doses = DoseTrials(cfg, world, pool, calib, calibrated_state(calibration_dir, calib), clean, damage, device)
    doses.reset()
    ref = doses.measure()
    rows = []
    bar = progress_bar(total=len(fractions) * trials, desc="dose trials", unit="trial", file=sys.stderr)
    for f in fractions:
        res = []
        for j in range(trials):
            res.append(doses.trial(f, j, ref))
            bar.update(1)
        rows.append({"fraction": f, "trials": res, "flag_rate": float(np.mean([bool(r["flagged"]) for r in res])),
                     "reject_rate": float(np.mean([bool(r["unrecovered"]) for r in res])),
                     "mean_max_rise_over_threshold": float(np.mean([r["max_rise_over_threshold"] for r in res])),
                     "realised_share": float(np.sum([r["harmful_targets"] for r in res])
                                             / np.sum([r["targets"] for r in res]))})
    bar.close()
    rec = {"k": calib["k"], "frac": calib["frac"], "sigma": calib["sigma"], "rows": rows, "trials": trials,
           "harmful_documents": "each trial draws the file's documents in its own seeded order, never repeating one"
           if harm == "parquet" else "each trial damages its own ordinary shard's documents",
           "harm": harm, "harm_parquet": str(harm_parquet) if harm_parquet else None,
           "note": "every trial starts from a deep copy of the calibrated state; each fraction uses the same "
                   "ordinary shards; a dose shard has the ordinary shard's size, its first round(f x size) "
                   "targets harmful"}
    atomic_write_json(out / "dose.json", rec)
    md = dose_md(rec, calib)
    atomic_write_text(out / "dose.md", "\n".join(md) + "\n")
    log("\n".join(md))
    return rec


def dose_md(rec, calib):
    """dose.md's lines: the harm, the rule, one table row per fraction."""
    harm, harm_parquet = rec["harm"], rec["harm_parquet"]
    md = ["# Dose-response of the queue's rule", "",
          f"harm: {harm}{f' ({harm_parquet})' if harm_parquet else ''}; k = {calib['k']}, recovery fraction "
          f"{calib['frac']}; {rec['trials']} ordinary shards per fraction, each trial from the calibrated state "
          "(model and optimizer moments restored), followed by one clean recovery shard.", "",
          "| harmful fraction | realised share of targets | flag rate | rejection rate | mean largest rise / threshold |",
          "|---|---|---|---|---|"]
    md += [f"| {r['fraction']:.0%} | {r['realised_share']:.2%} | {r['flag_rate']:.2f} | {r['reject_rate']:.2f} | "
           f"{r['mean_max_rise_over_threshold']:.2f} |" for r in rec["rows"]]
    return md + clean_dose_lines(rec["rows"], calib)


def clean_dose_lines(rows, calib):
    """Under the table, where the 0% dose (clean shards) was rejected: those are false rejections, beside the rate
    stage A measured (its calibration transitions), which they may not match on a corpus of several registers."""
    clean = [r for r in rows if r["fraction"] == 0 and r["reject_rate"] > 0]
    if not clean:
        return []
    return ["", f"At the 0% dose every trial is a clean shard: its rejection rate, {clean[0]['reject_rate']:.2f}, is a "
                f"false-rejection rate, against the {calib['false_rejections']}/{calib['transitions']} stage A "
                "measured on its calibration transitions (one source): a rate much above stage A's says the rule's "
                "calibration does not carry over to these shards."]


class DoseTrials:
    """One trial: ordinary shard `clean[j]` with its first round(f x size) targets harmful, trained from the
    calibrated state, measured, one clean recovery shard (`clean[j + 1]`) trained, and the rule applied."""

    def __init__(self, cfg, world, pool, calib, state, clean, damage, device):
        self.cfg, self.world, self.pool, self.calib, self.state = cfg, world, pool, calib, state
        self.shards = {s["id"]: s for s in pool["shards"]}
        self.clean, self.damage, self.device = clean, damage, device
        self.trainer = Trainer(cfg, device)

    def reset(self):
        # a deep copy: the optimizers' load_state_dict keeps the given moment tensors, which training
        # then updates in place, so a shared copy would carry one trial's momentum into the next
        self.trainer.load_state_dict(copy.deepcopy(self.state["trainer"]))

    def measure(self):
        tr, w = self.trainer, self.world
        return measure_control(tr.eval_fwd, w.sets["control"], w.token_bytes, self.device, tr.autocast, tr.fixed_rows)

    def train(self, tokens):
        cfg = self.cfg
        x, y = shard_rows(tokens, cfg.context, self.world.bos)
        train_rows(self.trainer, x, y, self.state["step"], cfg.updates, cfg.micro_rows, cfg.accum, 1.0)

    def docs_of(self, sid):
        return [np.asarray(self.world.stream.doc_tokens(i), dtype=np.int64) for i in shard_docs(self.shards[sid])]

    def dose_shard(self, f, j):
        """(tokens, harmful targets, the file's documents drawn or None) of trial j's shard at fraction f."""
        clean, damage = self.clean, self.damage
        own, total = self.docs_of(clean[j]), self.shards[clean[j]]["tokens"]
        rng = random.Random(f"{self.pool['seed']}/dose/{j}")  # damage.py's kinds take a random.Random
        spare = [clean[(j + 2 + m) % len(clean)] for m in range(2)]  # never the recovery shard clean[j + 1]
        drawn = None
        if isinstance(damage, list):  # the user's bad documents: new text, so the shard's own all stay clean
            order, n_used = trial_order(len(damage), self.pool["seed"], j), 0
            harm_docs = [damage[i] for i in order]
            drawn = order[: take_tokens(harm_docs, int(round(f * total)))[1]]  # file indices, in trained order
        else:  # the shard's own documents damaged (a spare shard's too, when damage shortens them)
            harm_docs = [damage(d, rng) for d in own + self.docs_of(spare[0])]
            n_used = take_tokens(harm_docs, int(round(f * total)))[1]
        # clean filler: the shard's documents not damaged, then another spare shard's
        filler = own[n_used:] + self.docs_of(spare[1])
        tokens, n_harm = exact_mix(harm_docs, filler, total, f)
        return tokens, n_harm, drawn

    def trial(self, f, j, ref):
        tokens, n_harm, drawn = self.dose_shard(f, j)
        calib = self.calib
        self.reset()
        self.train(tokens)
        after = self.measure()
        self.train(shard_tokens(self.world.stream, shard_docs(self.shards[self.clean[j + 1]])))
        after2 = self.measure()
        flagged, unrec = judge(ref, after, after2, calib["sigma"], calib["k"], calib["frac"])
        rise = max((after[d] - ref[d]) / (calib["k"] * calib["sigma"][d]) for d in ref)
        return {"shard": self.clean[j], "targets": int(len(tokens)), "harmful_targets": n_harm,
                "harmful_share": n_harm / len(tokens), "flagged": flagged, "unrecovered": unrec,
                "max_rise_over_threshold": rise, "harmful_documents": drawn,
                "harmful_sha256": hashlib.sha256(tokens[:n_harm].astype(np.int64).tobytes()).hexdigest()}
