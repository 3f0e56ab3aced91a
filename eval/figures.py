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
        ax.set_xlabel(f"tail minus beginning BPB delta (bits per byte)\n(vs same-seed baseline; {lvl:.3f}% Bonferroni interval)")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(list(ypos.values()), [f"{k[0]} s{k[1]}, {summaries[0]['spec']['labels'][k[2]]}" for k in ypos])
    shown = sorted({k[0] for k in keys})
    if shown:
        fig.legend([plt.Line2D([], [], marker="o", ls="", color=COLORS.get(c, "tab:blue")) for c in shown], shown,
                   loc="lower center", ncol=len(shown), fontsize=8, title="condition (vs same-seed baseline)")
    if not keys:
        axes[0][0].text(0.5, 0.5, "no declared contrasts evaluated", transform=axes[0][0].transAxes, ha="center")
    fig.suptitle("Section 5.5: declared contrasts, development and confirmation" + (f" {label}" if label else ""),
                 fontsize=11)
    fig.tight_layout(rect=(0, 0.1 if shown else 0, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def bin_contributions(summaries, path, label=""):
    """Tail position-bin contributions: one panel per population (rows) and condition (columns), all on one
    y-scale; the bins of a cell are side by side (not stacked: contributions can have both signs), with a
    marker at their sum, and a declared cell's label is starred."""
    conds = sorted({c["condition"] for s in summaries for c in s["cells"]}) or ["(none)"]
    fig, axes = plt.subplots(len(summaries), len(conds), figsize=(max(10, 5.6 * len(conds)), 4.1 * len(summaries)),
                             squeeze=False, sharey=True)
    cmap = plt.get_cmap("viridis")
    for row, s in enumerate(summaries):
        bins, labels = s["spec"]["bins"], s["spec"]["labels"]
        nb = len(bins) - 1
        w = 0.8 / nb
        for col, cond in enumerate(conds):
            ax = axes[row][col]
            cells = sorted((c for c in s["cells"] if c["condition"] == cond), key=lambda c: (c["stratum"], c["seed"]))
            x = np.arange(len(cells))
            for b in range(nb):
                v = np.array([c["tail_bins"][b] for c in cells])
                ax.bar(x + (b - (nb - 1) / 2) * w, v, width=w, color=cmap(b / max(1, nb - 1)),
                       label=f"positions [{bins[b]},{bins[b + 1]})")
            ax.scatter(x, [c["tail_delta"] for c in cells], marker="D", color="red", zorder=3, s=22,
                       label="window delta (sum of the bins)")
            ax.axhline(0, color="black", lw=0.8)
            ax.set_xticks(x, [("* " if c.get("declared") else "") + f"s{c['seed']}\n{labels[c['stratum']]}"
                              for c in cells], fontsize=7)
            ax.set_title(f"{cond}, {'development' if s['population'] == 'dev' else 'confirmation'}", fontsize=10)
            ax.set_xlabel("seed and source-length stratum (tokens); * declared contrast", fontsize=8)
            if col == 0:
                ax.set_ylabel("tail BPB delta contribution\n(bits per byte, vs same-seed baseline)")
            ax.grid(axis="y", alpha=0.3)
            if not cells:
                ax.text(0.5, 0.5, "no cells evaluated", transform=ax.transAxes, ha="center")
    h, lab = axes[0][0].get_legend_handles_labels()
    if h:
        fig.legend(h, lab, loc="lower center", ncol=len(lab), fontsize=8)
    fig.suptitle("Tail position-bin contributions vs same-seed baseline, by seed and source-length stratum"
                 + (f" {label}" if label else ""), fontsize=11)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def begin_tail_deltas(summaries, path, label=""):
    """Section 5.5 for every stratum: beginning and tail BPB deltas per condition and seed, and the interaction
    (tail minus beginning) with its 95% paired-bootstrap interval (Bonferroni-adjusted for declared cells)."""
    fig, axes = plt.subplots(1, len(summaries), figsize=(6.4 * len(summaries), 5.2), squeeze=False, sharex=True)
    for ax, s in zip(axes[0], summaries):
        labels = s["spec"]["labels"]
        cells = sorted(s["cells"], key=lambda c: (c["stratum"], c["condition"], c["seed"]))
        y = np.arange(len(cells))[::-1]
        ax.scatter([c["begin_delta"] for c in cells], y + 0.2, marker="<", color="tab:blue", s=22, label="beginning Δ")
        ax.scatter([c["tail_delta"] for c in cells], y, marker=">", color="tab:orange", s=22, label="tail Δ")
        for yi, c in zip(y - 0.2, cells):
            lo, hi = c.get("interval_adjusted") or c["interval95"]
            ax.errorbar(c["interaction"], yi, xerr=[[c["interaction"] - lo], [hi - c["interaction"]]], fmt="o",
                        color="black" if c.get("declared") else "0.55", capsize=2, ms=3)
        ax.errorbar([], [], xerr=[], fmt="o", color="black", label="tail − beginning, adjusted interval (declared)")
        ax.errorbar([], [], xerr=[], fmt="o", color="0.55", label="tail − beginning, 95% interval (exploratory)")
        ax.axvline(0, color="black", lw=0.8)
        ax.set_yticks(y, [f"{c['condition']} s{c['seed']}, {labels[c['stratum']]}" for c in cells], fontsize=7)
        ax.set_title("development" if s["population"] == "dev" else "confirmation", fontsize=10)
        ax.set_xlabel("BPB delta vs same-seed baseline (bits per byte)")
        ax.grid(axis="x", alpha=0.3)
        if not cells:
            ax.text(0.5, 0.5, "no cells evaluated", transform=ax.transAxes, ha="center")
    h, lab = axes[0][0].get_legend_handles_labels()
    if h:
        fig.legend(h, lab, loc="lower center", ncol=2, fontsize=8)
    fig.suptitle("Section 5.5: beginning and tail deltas for every stratum, with interaction intervals"
                 + (f" {label}" if label else ""), fontsize=11)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _mtargets(t):
    return f"{t / 1e6:.2f} M" if t >= 1e6 else f"{t:,}"


def prefix_rankings(rk, context, path, label=""):
    """Section 5.6: per method (one panel each), the BPB delta to the reference at each prefix with its subset
    interval, and the full-stream delta; the x ticks are the prefix sizes."""
    methods = [m for m in rk["methods"] if m != rk["reference"]]
    fig, axes = plt.subplots(1, len(methods), figsize=(max(9.5, 5.0 * len(methods)), 4.4), squeeze=False)
    targets = [p["rows"] * context for p in rk["prefixes"]]
    full_t = rk["total_rows"] * context
    for ax, m in zip(axes[0], methods):
        d = [next(c for c in p["contrasts"] if c["method"] == m) for p in rk["prefixes"]]
        y = [c["delta"] for c in d]
        # the interval drawn by its own ends, not as offsets from the delta: a delta can lie outside it (ringed below)
        lo, hi = [c["interval95"][0] for c in d], [c["interval95"][1] for c in d]
        ax.vlines(targets, lo, hi, color="tab:blue", lw=1.2)
        ax.scatter(targets + targets, lo + hi, marker="_", s=80, color="tab:blue")
        ax.plot(targets, y, "o", color="tab:blue", label="prefix delta, 95% subset interval")
        out = [(t, c["delta"]) for t, c in zip(targets, d) if c["outside"]]
        if out:
            ax.scatter(*zip(*out), s=140, facecolors="none", edgecolors="red", zorder=3, label="outside its interval")
        ax.scatter([full_t], [rk["full"][m] - rk["full"][rk["reference"]]], marker="*", s=140, color="tab:orange",
                   zorder=3, label="full stream")
        ax.axhline(0, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(targets + [full_t], [_mtargets(t) for t in targets + [full_t]], fontsize=8)
        ax.minorticks_off()
        ax.set_title(m, fontsize=10)
        ax.set_xlabel("targets scored (log scale; ticks: prefixes, full stream)")
        ax.set_ylabel(f"BPB delta vs {rk['reference']} (bits per byte)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _title(fig, "Section 5.6: BPB deltas on prefixes of the official stream, with same-size subset intervals", label)
    fig.savefig(path, dpi=110)
    plt.close(fig)
