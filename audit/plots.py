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
    """Stacked: sources <= R, long sources arrived but not protected, protected; none hides another."""
    lengths = rep.arrived_lengths()
    fig, ax = plt.subplots(figsize=(7.5, 4.4))
    bins = np.unique(np.geomspace(1, max(lengths.max(), 2) + 1, 60).astype(int))
    prot = np.zeros(len(lengths), bool)
    prot[sorted(protected)] = True
    long_ = lengths > rep.R
    parts = [lengths[~long_], lengths[long_ & ~prot], lengths[prot]]
    labels = [f"arrived, <= R ({len(parts[0]):,})", f"arrived, > R, not protected ({len(parts[1]):,})",
              f"protected: largest B-1 long ({len(parts[2]):,})"]
    bottom = np.zeros(len(bins) - 1)
    for part, label, color in zip(parts, labels, ["0.7", "tab:blue", "tab:red"]):
        h = np.histogram(part, bins=bins)[0].astype(float)
        # stacked step areas from precomputed counts (ax.hist's stacked patches are slow to draw)
        ax.stairs(bottom + h, bins, baseline=bottom.copy(), fill=True, color=color, label=label)
        bottom += h
    ax.axvline(rep.R, color="k", ls="--", lw=1, label=f"row capacity R={rep.R}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _save(fig, ax, "Source length histogram: protected vs other long sources", "source length (tokens, BOS included)",
          "sources (stacked)", path)
