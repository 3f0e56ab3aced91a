"""The audit's four figures (matplotlib, PNG)."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402



def _save(fig, ax, title, xlabel, ylabel, path, legend_loc="best"):
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, loc=legend_loc)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def retention_by_stratum(summaries, path):
    """Grouped bars; every bar carries its value, and a stratum no source fell into says so (n=0)."""
    fig, ax = plt.subplots(figsize=(10, 4.6))
    strata = summaries[0]["retention_by_stratum"]
    labels = [f"{r['stratum']}\nn={r['sources']:,}" for r in strata]
    w = 0.8 / len(summaries)
    x = np.arange(len(labels))
    for k, s in enumerate(summaries):
        xs = x + (k - (len(summaries) - 1) / 2) * w
        vals = [r["retained"] for r in s["retention_by_stratum"]]
        bars = ax.bar(xs, [100 * (v or 0) for v in vals], w, label=s["packer"])
        for xi, v in zip(xs, vals):
            # a measured zero and a missing stratum both draw no bar: the text tells them apart
            if v is None or v < 0.005:
                ax.text(xi, 1, "none" if v is None else "0%", ha="center", va="bottom", fontsize=7,
                        rotation=90, color="0.4" if v is None else bars.patches[0].get_facecolor())
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylim(0, 112)
    _save(fig, ax, "Retention of loaded token mass by source length (0%: emitted nothing; none: no source arrived)",
          f"original source length (tokens, BOS included); n = sources arrived ({summaries[0]['packer']})", "emitted share of loaded tokens (%)",
          path, legend_loc="upper left")


STYLES = {"original": dict(ls="-", lw=2.6, color="tab:blue"), "lossless": dict(ls="--", lw=1.6, color="tab:orange"),
          "segment_first": dict(ls="-.", lw=1.6, color="tab:green"), "random_span": dict(ls=":", lw=2.2, color="tab:red")}


def sources_started(reps, path):
    """Two panels: all sources, and sources longer than R (the paper's point: they wait)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for rep in reps:
        ev = rep.events
        _, first = np.unique(ev["source_id"], return_index=True)
        t = np.sort(ev["target_offset"][first])
        style = STYLES.get(rep.packer, {})
        axes[0].plot(t / 1e6, np.arange(1, len(t) + 1), label=rep.packer, **style)
        long_first = first[ev["source_len"][first] > rep.R]
        tl = np.sort(ev["target_offset"][long_first])
        axes[1].step(np.append(tl, ev["target_offset"][-1]) / 1e6, np.append(np.arange(1, len(tl) + 1), len(tl)),
                     where="post", label=f"{rep.packer} ({len(tl):,})", **style)
    axes[1].set_title(f"sources longer than R={reps[0].R} started")
    axes[1].set_xlabel("target offset (millions)")
    axes[1].set_ylabel("sources longer than R started")
    axes[1].legend(fontsize=8)
    _save(fig, axes[0], "All original sources started (random_span = original: same selections)",
          "target offset (millions)", "original sources started", path)


def buffer_mass(rep, trace, path, points=2000):
    """Buffered token mass before each selection, split into protected and other (trace: protected mass per event)."""
    ev = rep.events
    n, lengths = rep.stream.n, rep.stream.lengths
    arrived_at = np.zeros(len(ev) + 1, dtype=np.int64)
    for before, first, cnt in rep.refill_log:
        arrived_at[min(before, len(ev))] += int(lengths[np.arange(first, first + cnt) % n].sum())
    arrived = np.cumsum(arrived_at)[: len(ev)]
    gone = np.cumsum(ev["emitted"] + ev["discarded"]) - (ev["emitted"] + ev["discarded"])
    total = arrived - gone
    prot = np.asarray(trace, dtype=np.int64)
    idx = np.unique(np.linspace(0, len(ev) - 1, min(points, len(ev))).astype(int))
    x = ev["target_offset"][idx] / 1e6
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.stackplot(x, prot[idx] / 1e6, (total[idx] - prot[idx]) / 1e6, labels=["protected (largest B-1 long keys)", "other"])
    _save(fig, ax, f"Buffer token mass over the replay ({rep.packer})", "target offset (millions)",
          "buffered tokens (millions)", path, legend_loc="upper left")


def length_histogram(rep, protected, path):
    """Three groups drawn side by side, not stacked (stacking misleads on a log count axis); the bin
    edges meet at R + 0.5, so a source longer than R is never drawn left of the R line."""
    lengths = rep.arrived_lengths()
    fig, ax = plt.subplots(figsize=(8, 4.6))
    R, top = rep.R, max(int(lengths.max()), rep.R + 1)
    edge = R + 0.5
    left = np.geomspace(0.5, edge, 24)
    right = np.geomspace(edge, top + 1, 24)[1:] if top > R else np.array([])
    bins = np.concatenate([left, right])
    prot = np.zeros(len(lengths), bool)
    prot[sorted(protected)] = True
    long_ = lengths > R
    parts = [lengths[~long_], lengths[long_ & ~prot], lengths[prot]]
    labels = [f"arrived, <= R ({len(parts[0]):,})", f"arrived, > R, not protected ({len(parts[1]):,})",
              f"protected: largest B-1 long ({len(parts[2]):,})"]
    for part, label, color, lw in zip(parts, labels, ["0.45", "tab:blue", "tab:red"], [1.6, 1.6, 2.2]):
        h = np.histogram(part, bins=bins)[0].astype(float)
        ax.stairs(np.where(h > 0, h, np.nan), bins, color=color, lw=lw, label=label)
    ax.axvline(edge, color="k", ls="--", lw=1, label=f"row capacity R = {R:,}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)
    _save(fig, ax, "Arrived source lengths: short, long, and the protected set (groups not stacked)",
          "source length (tokens, BOS included; log scale)", "sources per bin (log scale)", path)


def startup_delay(perm, paper_range, path):
    """First emission of a source longer than R under each seeded arrival-order permutation."""
    delays = [d for d in perm["delays"] if d is not None]
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    seeds = [s for s, d in zip(perm["seeds"], perm["delays"]) if d is not None]
    ax.scatter(np.array(delays) / 1e6, seeds, color="tab:blue", s=28, label=f"permuted arrival order ({len(delays)})")
    if perm.get("unpermuted") is not None:
        ax.axvline(perm["unpermuted"] / 1e6, color="tab:red", lw=1.6, label="corpus order (unpermuted)")
    never = len(perm["delays"]) - len(delays)
    if never:
        ax.text(0.99, 0.02, f"{never} permutation(s): no long source emitted within the budget",
                transform=ax.transAxes, ha="right", fontsize=8)
    ax.set_yticks(perm["seeds"][:: max(1, len(perm["seeds"]) // 10)])
    _save(fig, ax, f"Startup delay over {perm['count']} permutations (paper: {paper_range[0] / 1e6:.2f}–"
          f"{paper_range[1] / 1e6:.2f} M targets at its scale)", "targets before the first long-source emission (millions)",
          "permutation seed", path)


def pass_bounds(ours, paper, B, path):
    """Earliest possible pass by length threshold: ours (this stream) and the paper's, on log axes."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if ours:
        ax.plot([r["length_at_least"] for r in ours], [r["earliest_possible_pass"] for r in ours], "o-",
                color="tab:blue", label=f"this stream, B = {B:,}")
    ax.plot([r[0] for r in paper], [r[2] for r in paper], "s--", color="tab:gray", label="the paper (ClimbMix, B = 1,000)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    _save(fig, ax, "Repeated-corpus bound: earliest pass a source can start", "original length at least (tokens; log scale)",
          "earliest possible pass (log scale)", path)


FIGURE_NOTES = {
    "retention_by_stratum.png": "How much of each length stratum's loaded tokens each packer emitted; compare the "
                                "packers within a stratum (retention is not monotone in length).",
    "sources_started.png": "Sources started against targets: the right panel shows how late, and how few, sources "
                           "longer than R start under each packer.",
    "buffer_mass.png": "The buffer's token mass over the replay: the blue band is the protected set (the largest "
                       "B - 1 long sources arrived so far), which no selection touches; orange is everything else.",
    "length_histogram.png": "Arrived lengths by group; every protected source (red) is among the longest, right of the "
                            "R line.",
    "startup_delay.png": "Where the first long source is emitted under each arrival-order permutation: the spread is "
                         "the order's effect, the red line the corpus order.",
    "pass_bounds.png": "The earliest pass in which a source of at least that length can start in a repeated corpus; "
                       "the bound grows as the longest sources become rarer.",
}
