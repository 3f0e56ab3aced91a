"""Figures of the six training runs (section 5.3): validation learning curves on shared axes, and
official BPB by condition and seed beside the paper's."""
import io
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from corpus.atomic import atomic_write_bytes  # noqa: E402

COLORS = {"baseline": "tab:blue", "random_crop": "tab:orange", "segmented": "tab:green"}
SEED_STYLE = {43: "-", 44: "--"}
SEED_MARKER = {43: "o", 44: "s"}

BPB_NOTE = ("BPB by condition and seed: our official BPB (left) beside the paper's (right), each on its own scale; "
            "compare the ordering of the conditions, not the levels.")


def _save(fig, path):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _condition(name):
    return name.rsplit("_s", 1)[0]


def _val_points(run_dir):
    log = [json.loads(x) for x in (run_dir / "train_log.jsonl").read_text().splitlines() if x.strip()]
    return {e["targets"]: e["val_bpb"] for e in log if "val_bpb" in e}


def curve_population(results, curve_batches) -> dict:
    """What the curves measure: the official stream's first `curve_batches` batches (train.py curve_probe), a
    part of the official score's rows, so their level is not the official BPB's."""
    c = results[0]["config"]
    k = min(c["eval_batches"], curve_batches)
    return {"batches": k, "of": c["eval_batches"], "targets": k * c["eval_rows"] * c["context"],
            "official_targets": results[0]["official"]["eval_targets"]}


def learning_curves_note(results, curve_batches) -> str:
    p = curve_population(results, curve_batches)
    return (f"Learning curves: validation BPB on the first {p['batches']} of the {p['of']} official batches "
            f"({p['targets']:,} of the official score's {p['official_targets']:,} validation targets), the same rows "
            f"at every point for every run (left; training losses sample different rows per condition and are not "
            f"comparable), and each intervention's difference from its same-seed baseline (right): a curve above "
            f"zero is worse than the baseline at that point of training. A curve's last point is not the official "
            f"BPB: that is on all {p['of']} batches, in the table.")


def learning_curves(run_dirs, results, path, curve_batches):
    """curve_batches: the official batches each validation point is on (train.py CURVE_BATCHES), named on the axes."""
    on = curve_population(results, curve_batches)
    fig, (ax, axd) = plt.subplots(1, 2, figsize=(12, 4.6))
    pts = {(_condition(r["name"]), r["seed"]): _val_points(d) for d, r in zip(run_dirs, results)}
    for (cond, seed), p in sorted(pts.items()):
        if p:
            xs = sorted(p)
            ax.plot([x / 1e3 for x in xs], [p[x] for x in xs], color=COLORS.get(cond), ls=SEED_STYLE.get(seed, ":"),
                    marker=".", label=f"{cond} seed {seed}")
        base = pts.get(("baseline", seed))
        if cond != "baseline" and p and base:
            xs = sorted(set(p) & set(base))
            axd.plot([x / 1e3 for x in xs], [p[x] - base[x] for x in xs], color=COLORS.get(cond),
                     ls=SEED_STYLE.get(seed, ":"), marker=".", label=f"{cond} − baseline, seed {seed}")
    if not any(pts.values()):
        ax.text(0.5, 0.5, "no validation points in train_log.jsonl", transform=ax.transAxes, ha="center")
    ax.set(title=f"Validation BPB on the first {on['batches']} of {on['of']} official batches "
                 f"({on['targets']:,} targets)", xlabel="training targets (thousands)",
           ylabel=f"validation BPB on {on['targets']:,} targets (not the official score)")
    axd.axhline(0, color="black", lw=0.8)
    axd.set(title="Difference from the same-seed baseline", xlabel="training targets (thousands)",
            ylabel="Δ validation BPB (bits per byte)")
    for a in (ax, axd):
        a.grid(alpha=0.3)
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=8)
    fig.suptitle("Section 5.3 learning curves: every condition and seed on shared axes", fontsize=11)
    fig.tight_layout()
    _save(fig, path)


def bpb_by_condition(results, paper_bpb, path):
    conds = list(COLORS)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    ours = {(_condition(r["name"]), r["seed"]): r["official"]["bpb"] for r in results}
    paper = {(k.rsplit("_s", 1)[0], int(k.rsplit("_s", 1)[1])): v for k, v in paper_bpb.items()}
    for ax, vals, who in ((axes[0], ours, "ours (this run)"), (axes[1], paper, "the paper")):
        for seed in sorted({k[1] for k in vals}):
            pts = [(conds.index(c) + (0.08 if seed == 44 else -0.08), v) for (c, s_), v in vals.items()
                   if s_ == seed and c in conds]
            pts.sort()
            ax.plot(*zip(*pts), color="0.7", lw=0.8, ls=SEED_STYLE.get(seed, ":"), zorder=1)
            for x, v in pts:
                ax.scatter(x, v, color=COLORS[conds[round(x)]], marker=SEED_MARKER.get(seed, "^"), s=50, zorder=2)
            ax.scatter([], [], color="0.3", marker=SEED_MARKER.get(seed, "^"), label=f"seed {seed}")
        if vals:
            ax.legend(fontsize=8, title="seed (colour: condition)")
        ax.set_xticks(range(len(conds)), conds)
        ax.set(title=f"Official BPB, {who}", xlabel="condition", ylabel="official BPB (bits per byte)")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Section 5.3: official BPB by condition and seed, ours beside the paper's (separate scales)",
                 fontsize=11)
    fig.tight_layout()
    _save(fig, path)
