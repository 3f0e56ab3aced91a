"""The evaluation's figures (matplotlib, PNG), drawn from the summaries the report prints."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLORS = {"random_crop": "tab:orange", "segmented": "tab:green", "lossless": "tab:purple"}


def _title(fig, text, label):
    fig.suptitle(text + (f" {label}" if label else ""), fontsize=11)
    fig.tight_layout()


def contrasts_forest(summaries, path, label=""):
    """Section 5.5: declared contrasts (tail minus beginning) with Bonferroni intervals, one panel per population."""
    fig, axes = plt.subplots(1, len(summaries), figsize=(5.2 * len(summaries), 4.6), sharey=True, sharex=True,
                             squeeze=False)
    keys = sorted({(c["condition"], c["seed"], c["stratum"]) for s in summaries for c in s["cells"] if c.get("declared")},
                  key=lambda k: (k[2], k[0], k[1]))
    ypos = {k: i for i, k in enumerate(reversed(keys))}
    for ax, s in zip(axes[0], summaries):
        for c in s["cells"]:
            if not c.get("declared"):
                continue
            y = ypos[(c["condition"], c["seed"], c["stratum"])]
            lo, hi = c["interval_adjusted"]
            col = COLORS.get(c["condition"], "tab:blue")
            ax.errorbar(c["interaction"], y, xerr=[[c["interaction"] - lo], [hi - c["interaction"]]], fmt="o",
                        color=col, capsize=3)
        ax.axvline(0, color="black", lw=1)
        lvl = 100 * (1 - s["params"]["alpha"] / max(1, len(s["params"]["contrasts"])))
        ax.set_title(f"{s['population']} ({'development' if s['population'] == 'dev' else 'confirmation'})", fontsize=10)
        ax.set_xlabel(f"tail minus beginning BPB delta\n(vs same-seed baseline; {lvl:.3f}% Bonferroni interval)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(list(ypos.values()), [f"{k[0]} s{k[1]}, {summaries[0]['spec']['labels'][k[2]]}" for k in ypos])
    if not keys:
        axes[0][0].text(0.5, 0.5, "no declared contrasts evaluated", transform=axes[0][0].transAxes, ha="center")
    _title(fig, "Section 5.5: declared contrasts, development and confirmation", label)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bin_contributions(summaries, path, label=""):
    """Tail position-bin contributions: one panel per population (rows) and condition (columns), so a small
    effect is not flattened by a large one; per seed and stratum stacked bars with a marker at their sum."""
    conds = sorted({c["condition"] for s in summaries for c in s["cells"]}) or ["(none)"]
    fig, axes = plt.subplots(len(summaries), len(conds), figsize=(max(9.5, 5.2 * len(conds)), 3.9 * len(summaries)),
                             squeeze=False, sharey="col")
    cmap = plt.get_cmap("viridis")
    for row, s in enumerate(summaries):
        bins, labels = s["spec"]["bins"], s["spec"]["labels"]
        for col, cond in enumerate(conds):
            ax = axes[row][col]
            cells = sorted((c for c in s["cells"] if c["condition"] == cond), key=lambda c: (c["stratum"], c["seed"]))
            x = np.arange(len(cells))
            pos, neg = np.zeros(len(cells)), np.zeros(len(cells))
            for b in range(len(bins) - 1):
                v = np.array([c["tail_bins"][b] for c in cells])
                ax.bar(x, v, bottom=np.where(v >= 0, pos, neg), color=cmap(b / max(1, len(bins) - 2)), width=0.7,
                       label=f"positions [{bins[b]},{bins[b + 1]})")
                pos, neg = pos + np.clip(v, 0, None), neg + np.clip(v, None, 0)
            ax.scatter(x, [c["tail_delta"] for c in cells], marker="D", color="red", zorder=3, s=22,
                       label="window delta (sum of the bins)")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks(x, [f"s{c['seed']}\n{labels[c['stratum']]}" for c in cells], fontsize=7)
            ax.set_title(f"{cond}, {'development' if s['population'] == 'dev' else 'confirmation'}", fontsize=10)
            if col == 0:
                ax.set_ylabel("tail BPB delta contribution")
            if not cells:
                ax.text(0.5, 0.5, "no cells evaluated", transform=ax.transAxes, ha="center")
            elif row == 0 and col == len(conds) - 1:
                ax.legend(fontsize=7, loc="best")
    _title(fig, "Tail position-bin contributions vs same-seed baseline, by seed and source-length stratum", label)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def prefix_rankings(rk, context, path, label=""):
    """Section 5.6: per method (one panel each), the BPB delta to the reference at each prefix with its subset
    interval, and the full-stream delta."""
    methods = [m for m in rk["methods"] if m != rk["reference"]]
    fig, axes = plt.subplots(1, len(methods), figsize=(max(9.5, 5.0 * len(methods)), 4.2), squeeze=False)
    targets = [p["rows"] * context for p in rk["prefixes"]]
    full_t = rk["total_rows"] * context
    for ax, m in zip(axes[0], methods):
        d = [next(c for c in p["contrasts"] if c["method"] == m) for p in rk["prefixes"]]
        y = [c["delta"] for c in d]
        err = [[c["delta"] - c["interval95"][0] for c in d], [c["interval95"][1] - c["delta"] for c in d]]
        ax.errorbar(targets, y, yerr=err, fmt="o", color="tab:blue", capsize=4, label="prefix delta, 95% subset interval")
        out = [(t, c["delta"]) for t, c in zip(targets, d) if c["outside"]]
        if out:
            ax.scatter(*zip(*out), s=140, facecolors="none", edgecolors="red", zorder=3, label="outside its interval")
        ax.scatter([full_t], [rk["full"][m] - rk["full"][rk["reference"]]], marker="*", s=140, color="tab:orange",
                   zorder=3, label="full stream")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_title(m, fontsize=10)
        ax.set_xlabel("targets scored (log scale)")
        ax.set_ylabel(f"BPB delta vs {rk['reference']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _title(fig, "Section 5.6: BPB deltas on prefixes of the official stream, with same-size subset intervals", label)
    fig.savefig(path, dpi=110)
    plt.close(fig)
