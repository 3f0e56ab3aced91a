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


def sources_started(summaries, R, path):
    """Two panels: all sources, and sources longer than R (the paper's point: they wait)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for s in summaries:
        p = s["plot"]
        x = np.asarray(p["curve_edges"][1:]) / 1e6
        style = STYLES.get(s["packer"], {})
        axes[0].plot(x, p["started"], label=s["packer"], **style)
        axes[1].step(x, p["started_long"], where="post", label=f"{s['packer']} ({p['started_long'][-1]:,})", **style)
    axes[1].set_title(f"sources longer than R={R} started")
    axes[1].set_xlabel("target offset (millions)")
    axes[1].set_ylabel("sources longer than R started")
    axes[1].legend(fontsize=8)
    _save(fig, axes[0], "All original sources started (random_span = original: same selections)",
          "target offset (millions)", "original sources started", path)


def buffer_mass(summary, path):
    """Buffered token mass at the sampled rows of the replay, split into protected and other."""
    c = np.asarray(summary["plot"]["buffer_curve"], dtype=float)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if len(c):
        x, total, prot = c[:, 0] / 1e6, c[:, 1], c[:, 2]
        ax.stackplot(x, prot / 1e6, (total - prot) / 1e6, labels=["protected (largest B-1 long keys)", "other"])
    _save(fig, ax, f"Buffer token mass over the replay ({summary['packer']})", "target offset (millions)",
          "buffered tokens (millions)", path, legend_loc="upper left")


def length_histogram(summary, R, path):
    """Three groups drawn side by side, not stacked (stacking misleads on a log count axis); the bin
    edges meet at R + 0.5, so a source longer than R is never drawn left of the R line."""
    vals, counts = (np.asarray(v) for v in zip(*summary["plot"]["length_counts"]))
    prot = np.asarray(summary["plot"]["protected_lengths"], dtype=np.int64)
    fig, ax = plt.subplots(figsize=(8, 4.6))
    top = max(int(vals.max()), R + 1)
    edge = R + 0.5
    left = np.geomspace(0.5, edge, 24)
    right = np.geomspace(edge, top + 1, 24)[1:] if top > R else np.array([])
    bins = np.concatenate([left, right])
    short = np.histogram(vals[vals <= R], bins=bins, weights=counts[vals <= R])[0]
    long_all = np.histogram(vals[vals > R], bins=bins, weights=counts[vals > R])[0]
    h_prot = np.histogram(prot, bins=bins)[0]
    parts = [short, long_all - h_prot, h_prot]
    labels = [f"arrived, <= R ({int(short.sum()):,})", f"arrived, > R, not protected ({int((long_all - h_prot).sum()):,})",
              f"protected: largest B-1 long ({len(prot):,})"]
    for h, label, color, lw in zip(parts, labels, ["0.45", "tab:blue", "tab:red"], [1.6, 1.6, 2.2]):
        h = h.astype(float)
        ax.stairs(np.where(h > 0, h, np.nan), bins, color=color, lw=lw, label=label)
    ax.axvline(edge, color="k", ls="--", lw=1, label=f"row capacity R = {R:,}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.7)
    _save(fig, ax, "Arrived source lengths: short, long, and the protected set (groups not stacked)",
          "source length (tokens, BOS included; log scale)", "sources per bin (log scale)", path)


def label_coverage(summaries, path):
    """Per label and packer: share of emitted tokens over share of arrived tokens (1 = as it arrived)."""
    labels = [d["label"] for d in summaries[0]["by_label"]]
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(labels) + 3), 4.2))
    w = 0.8 / len(summaries)
    x = np.arange(len(labels))
    for k, s in enumerate(summaries):
        rep = {d["label"]: d["representation"] for d in s["by_label"]}
        ax.bar(x + (k - (len(summaries) - 1) / 2) * w, [rep.get(lab) or 0 for lab in labels], w, label=s["packer"])
    ax.axhline(1, color="k", lw=1, ls="--")
    ax.set_xticks(x, labels, fontsize=8, rotation=20)
    _save(fig, ax, "Per-label representation: share of emitted over share of arrived tokens", "label",
          "representation (1 = as arrived)", path)


def position_exposure(summaries, path):
    """Heat-maps, one per packer: emitted share of each tenth of positions, by length stratum."""
    n = len(summaries)
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n + 1.5, 4.2), squeeze=False)
    for ax, s in zip(axes[0], summaries):
        ex = s["position_exposure"]
        m = np.array([[np.nan if v is None else v for v in e["emitted_share"]] for e in ex])
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(ex)), [e["stratum"] for e in ex], fontsize=7)
        ax.set_xticks(range(0, 10, 3), [f"{10 * d}%" for d in range(0, 10, 3)], fontsize=7)
        ax.set_title(s["packer"], fontsize=9)
        ax.set_xlabel("position in source", fontsize=8)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="emitted share")
    fig.suptitle("Position exposure: which tenths of each source's positions the rows contain", fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def comparison(comp, path):
    """Stacked shares per packer (emitted / discarded / buffered of arrived tokens) and padding."""
    names = list(comp["packers"])
    rows = [comp["packers"][n] for n in names]
    fig, ax = plt.subplots(figsize=(max(7, 0.9 * len(names) + 3), 4.4))
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    for key, label, color in (("emitted_share", "emitted", "tab:green"), ("discarded_share", "discarded", "tab:red"),
                              ("buffered_share", "buffered at the horizon", "tab:blue")):
        v = np.array([100 * r[key] for r in rows])
        ax.bar(x, v, 0.6, bottom=bottom, label=label, color=color)
        bottom += v
    ax.plot(x, [100 * r["padding_share"] for r in rows], "k^", label="padding (share of row capacity)")
    for xi, r in zip(x, rows):
        ax.text(xi, 101, f"{r['long_never_started']:,}/{r['long_arrived']:,}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    ax.set_ylim(0, 112)
    _save(fig, ax, "Packers at the same budget (above each bar: sources > R never started / arrived)", "packer",
          "share of arrived tokens (%)", path, legend_loc="lower left")


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
    "label_coverage.png": "Each label's share of the emitted tokens over its share of the arrived ones, per packer: "
                          "below the dashed line a packer under-represents that label.",
    "position_exposure.png": "For each length stratum (rows) and tenth of the source's positions (columns), the share "
                             "of those tokens the rows contain: a dark right side is prefix bias.",
    "comparison.png": "Every packer at the same budget: where the arrived tokens went, the padding, and how many "
                      "sources longer than R never started.",
    "startup_delay.png": "Where the first long source is emitted under each arrival-order permutation: the spread is "
                         "the order's effect, the red line the corpus order.",
    "pass_bounds.png": "The earliest pass in which a source of at least that length can start in a repeated corpus; "
                       "the bound grows as the longest sources become rarer.",
}
