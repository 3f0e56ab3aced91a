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
    fig, ax = plt.subplots(figsize=(9, 4.2))
    labels = [r["stratum"] for r in summaries[0]["retention_by_stratum"]]
    w = 0.8 / len(summaries)
    x = np.arange(len(labels))
    for k, s in enumerate(summaries):
        vals = [100 * (r["retained"] or 0) for r in s["retention_by_stratum"]]
        ax.bar(x + (k - (len(summaries) - 1) / 2) * w, vals, w, label=s["packer"])
    ax.set_xticks(x, labels, rotation=30)
    _save(fig, ax, "Retention of loaded token mass by source length", "original source length (tokens, BOS included)",
          "emitted share of loaded tokens (%)", path)


def sources_started(reps, path):
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for rep in reps:
        ev = rep.events
        _, first = np.unique(ev["source_id"], return_index=True)
        t = np.sort(ev["target_offset"][first])
        ax.plot(t / 1e6, np.arange(1, len(t) + 1), label=rep.packer)
    _save(fig, ax, "Sources started vs target offset", "target offset (millions)", "original sources started", path)


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
    lengths = rep.arrived_lengths()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    bins = np.unique(np.geomspace(1, max(lengths.max(), 2) + 1, 60).astype(int))
    ax.hist(lengths, bins=bins, label="arrived sources", color="tab:blue", alpha=0.75)
    if protected:
        ax.hist(lengths[sorted(protected)], bins=bins, label=f"protected ({len(protected)})", color="tab:red")
    ax.axvline(rep.R, color="k", ls="--", lw=1, label=f"row capacity R={rep.R}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    _save(fig, ax, "Source length histogram with the protected set", "source length (tokens, BOS included)", "sources", path)
