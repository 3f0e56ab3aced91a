"""The audit's figures (matplotlib, PNG)."""
import textwrap

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from audit.fmt import shown_labels  # noqa: E402

# ---- one colour per packer --------------------------------------------------------------
# Every packer keeps one colour in every figure, and no two packers share one: the paper's four
# keep tab10's first four colours and their line styles; the library packers get the rest of
# tab10 and a few darker or lighter tones, a library's second and third variants also a dashed
# line and a hatch, so packers of similar colour still differ. A packer not listed here (a new
# one) gets the first spare colour no packer of the figure uses.
PACKER_STYLES = {
    "original": dict(color="#1f77b4", ls="-", lw=2.6),
    "lossless": dict(color="#ff7f0e", ls="--", lw=1.6),
    "segment_first": dict(color="#2ca02c", ls="-.", lw=1.6),
    "random_span": dict(color="#d62728", ls=":", lw=2.2),
    "concat_chunk": dict(color="#000000", ls="-", lw=1.4),
    "trl_bfd": dict(color="#9467bd", ls="-", lw=1.6),
    "trl_bfd_split": dict(color="#e377c2", ls="--", lw=1.6, hatch="//"),
    "trl_wrapped": dict(color="#8c564b", ls="-.", lw=1.6, hatch=".."),
    "olmo_truncate": dict(color="#bcbd22", ls="-", lw=1.6),
    "olmo_fragment": dict(color="#17becf", ls="--", lw=1.6, hatch="//"),
    "torchtune_chat": dict(color="#7f7f7f", ls="-", lw=1.6),
    "torchtune_text": dict(color="#e6ab02", ls="--", lw=1.6, hatch="//"),
    "titan_concat": dict(color="#393b79", ls="--", lw=1.6),  # dashed: it runs on top of concat_chunk's black
    "titan_first_fit": dict(color="#ff9896", ls="--", lw=1.6, hatch="//"),
}
SPARE_COLOURS = ("#637939", "#843c39", "#7b4173", "#9c9ede", "#e7ba52", "#6baed6", "#74c476", "#fd8d3c", "#a55194",
                 "#969696", "#cedb9c", "#e7969c")


def packer_styles(names):
    """name -> line style (color, ls, lw) and, under "hatch", the bars' hatch (None: plain): no two names share a colour."""
    out, used = {}, set()
    for n in names:
        if n in PACKER_STYLES:
            out[n] = dict(PACKER_STYLES[n])
            used.add(out[n]["color"])
    spare = iter(c for c in SPARE_COLOURS + tuple(matplotlib.colormaps["tab20"].colors) if matplotlib.colors.to_hex(c) not in used)
    for n in names:
        if n not in out:
            c = matplotlib.colors.to_hex(next(spare))  # more new packers than spare colours: StopIteration, not a repeat
            out[n] = dict(color=c, ls="-", lw=1.6)
            used.add(c)
    for st in out.values():
        st.setdefault("hatch", None)
    return out


def _line(style):
    return {k: style[k] for k in ("color", "ls", "lw")}


def _bar(style):
    # hatch lines in white over the colour; no outline, so a narrow bar keeps its colour
    return dict(color=style["color"], hatch=style["hatch"], edgecolor="white", linewidth=0)


def _wrap(text, fig, fontsize=12, share=1.0):
    """The title broken into lines that fit `share` of the figure's width (a character is about 0.55 em)."""
    width = max(20, int(share * fig.get_figwidth() * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def _legend_outside(ax, **kw):
    """The legend right of the axes, never over the data (the figure's layout leaves it room)."""
    return ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kw)


def _write(fig, path):
    # every figure here has constrained layout, which keeps titles, labels and outside legends on the canvas (a
    # figure is within a few pixels of its bbox_inches="tight" crop, checked 2026-12-07), so it is written as laid
    # out: the crop would draw each figure once more to measure it, a third of savefig's time
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _save(fig, ax, title, xlabel, ylabel, path):
    """Title (wrapped to the figure's width), axis labels, the legend right of the axes, written."""
    ax.set_title(_wrap(title, fig))
    if xlabel:  # None: set by the caller (the lowest of several rows)
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend_outside(ax)
    _write(fig, path)


def retention_by_stratum(summaries, path):
    """Grouped bars; every bar carries its value, and a stratum no source fell into says so (n=0)."""
    strata = summaries[0]["retention_by_stratum"]
    styles = packer_styles([s["packer"] for s in summaries])
    fig, ax = plt.subplots(figsize=(max(10.0, 0.11 * len(strata) * len(summaries) + 3), 4.8), layout="constrained")
    labels = [f"{r['stratum']}\nn={r['sources']:,}" for r in strata]
    w = 0.8 / len(summaries)
    x = np.arange(len(labels))
    for k, s in enumerate(summaries):
        xs = x + (k - (len(summaries) - 1) / 2) * w
        vals = [r["retained"] for r in s["retention_by_stratum"]]
        st = styles[s["packer"]]
        ax.bar(xs, [100 * (v or 0) for v in vals], w, label=s["packer"], **_bar(st))
        for xi, v in zip(xs, vals):
            # a measured zero and a missing stratum both draw no bar: the text tells them apart
            if v is None or v < 0.005:
                ax.text(xi, 1, "none" if v is None else "0%", ha="center", va="bottom", fontsize=7 if len(summaries) <= 6 else 6,
                        rotation=90, color="0.4" if v is None else st["color"])
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    ax.set_ylim(0, 112)
    _save(fig, ax, "Retention of loaded token mass by source length (0%: emitted nothing; none: no source arrived)",
          f"original source length (tokens, BOS included); n = sources arrived ({summaries[0]['packer']})", "emitted share of loaded tokens (%)",
          path)


def _text_panel(ax, text, width=46):
    """A panel with nothing to plot: it says so in words instead of drawing an empty or flat axis."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.text(0.5, 0.5, "\n".join(textwrap.fill(line, width) for line in text.split("\n")), transform=ax.transAxes,
            ha="center", va="center", fontsize=10, color="0.25")


def _identical_curves(summaries):
    """Packers grouped by identical start curves, in order: a group is drawn once, named 'a = b'."""
    groups = {}
    for s in summaries:
        p = s["plot"]
        key = (tuple(p["curve_edges"]), tuple(p["started"]), tuple(p["started_long"]))
        groups.setdefault(key, []).append(s)
    return list(groups.values())


def sources_started(summaries, R, path):
    """Two panels: all sources, and sources longer than R (the paper's point: they wait). Packers whose
    curves coincide are drawn once and named together ("original = random_span"); a right panel on
    which no curve moves says so in words."""
    styles = packer_styles([s["packer"] for s in summaries])
    groups = _identical_curves(summaries)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), layout="constrained")
    long_vals = {v for s in summaries for v in s["plot"]["started_long"]}
    flat = len(long_vals) <= 1
    for g in groups:
        p = g[0]["plot"]
        x = np.asarray(p["curve_edges"][1:]) / 1e6
        style = _line(styles[g[0]["packer"]])
        name = " = ".join(s["packer"] for s in g)
        axes[0].plot(x, p["started"], label=f"{name} ({p['started_long'][-1]:,})", **style)
        if not flat:
            axes[1].step(x, p["started_long"], where="post", **style)
    merged = any(len(g) > 1 for g in groups)
    axes[0].set_title(_wrap("All original sources started" + (" (packers joined by '=' have identical curves, drawn once)"
                                                               if merged else ""), fig, share=0.5))
    axes[0].set_xlabel("target offset (millions)")
    axes[0].set_ylabel("original sources started")
    caps = sorted({s.get("row_capacity", R) for s in summaries})  # a library loader's rows hold R - 1 tokens
    R_is = f"R = {caps[0]:,}" if len(caps) == 1 else "R"
    axes[1].set_title(f"sources longer than {R_is} started" + ("" if len(caps) == 1 else  # the legend sits beside it
                      f"\n(R: each packer's row capacity, {' or '.join(f'{c:,}' for c in caps)})"))
    if flat:
        arrived = sorted({s.get("sources_longer_than_R_arrived") for s in summaries} - {None})
        v = long_vals.pop() if long_vals else 0
        who = summaries[0]["packer"] if len(summaries) == 1 else "any packer"
        _text_panel(axes[1], (f"No source longer than {R_is} started within the budget under {who}" if v == 0 else
                              f"Under {who}, the count of sources longer than {R_is} started stays at {v:,} from the "
                              "first point to the last")
                    + (f" ({', '.join(f'{a:,}' for a in arrived)} arrived)" if arrived else "")
                    + ".\nA flat line: nothing to plot.")
    else:
        axes[1].set_xlabel("target offset (millions)")
        axes[1].set_ylabel("sources longer than R started")
    fig.legend(loc="outside right upper", fontsize=8, title="packer (sources longer\nthan R started at the end)",
               title_fontsize=8)
    _write(fig, path)


def buffer_mass(summary, path):
    """Buffered token mass at the sampled rows of the replay, split into protected and other."""
    c = np.asarray(summary["plot"]["buffer_curve"], dtype=float)
    fig, ax = plt.subplots(figsize=(9.5, 4.2), layout="constrained")
    if len(c):
        x, total, prot = c[:, 0] / 1e6, c[:, 1], c[:, 2]
        ax.stackplot(x, prot / 1e6, (total - prot) / 1e6, labels=["protected (largest B-1 long keys)", "other"])
    _save(fig, ax, f"Buffer token mass over the replay ({summary['packer']})", "target offset (millions)",
          "buffered tokens (millions)", path)


def length_histogram(summary, R, path):
    """Three groups drawn side by side, not stacked (stacking misleads on a log count axis); the bin
    edges meet at R + 0.5, so a source longer than R is never drawn left of the R line."""
    vals, counts = (np.asarray(v) for v in zip(*summary["plot"]["length_counts"]))
    prot = np.asarray(summary["plot"]["protected_lengths"], dtype=np.int64)
    fig, ax = plt.subplots(figsize=(10.5, 4.6), layout="constrained")
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
    shown, more = shown_labels(summaries[0]["by_label"], lambda d: d["docs"])
    labels = [d["label"] for d in shown]
    styles = packer_styles([s["packer"] for s in summaries])
    fig, ax = plt.subplots(figsize=(max(6, (0.8 + 0.12 * len(summaries)) * len(labels) + 2), 4.2), layout="constrained")
    w = 0.8 / len(summaries)
    x = np.arange(len(labels))
    for k, s in enumerate(summaries):
        rep = {d["label"]: d["representation"] for d in s["by_label"]}
        ax.bar(x + (k - (len(summaries) - 1) / 2) * w, [rep.get(lab) or 0 for lab in labels], w, label=s["packer"],
               **_bar(styles[s["packer"]]))
    ax.axhline(1, color="k", lw=1, ls="--")
    ax.set_xticks(x, labels, fontsize=8, rotation=20)
    ax.set_xlim(-0.5, len(labels) - 0.5)
    _save(fig, ax, "Per-label representation: share of emitted over share of arrived tokens"
          + (f" ({len(labels)} labels with the most arrivals; {more:,} more in summary.json)" if more else ""),
          "label", "representation (1 = as arrived)", path)


POSITION_PANELS_PER_ROW = 5


def position_exposure(summaries, path):
    """Heat-maps, one per packer: emitted share of each tenth of positions, by length stratum."""
    n = len(summaries)
    rows = -(-n // POSITION_PANELS_PER_ROW)
    cols = -(-n // rows)  # at most 5 a row, as few rows as that allows: 13 panels are 5 + 5 + 3, 4 are one row
    # one stratum axis for the whole grid: only the first column names the strata, so no label runs into a panel
    fig, axes = plt.subplots(rows, cols, figsize=(2.6 * cols + 2.2, 2.9 * rows + 0.8), squeeze=False, sharey=True,
                             layout="constrained")
    flat = axes.ravel()
    for ax in flat[n:]:
        ax.set_visible(False)
    for i, (ax, s) in enumerate(zip(flat, summaries)):
        ex = s["position_exposure"]
        m = np.array([[np.nan if v is None else v for v in e["emitted_share"]] for e in ex])
        im = ax.imshow(m, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_yticks(range(len(ex)), [e["stratum"] for e in ex], fontsize=7)
        ax.set_xticks(range(0, 10, 3), [f"{10 * d}%" for d in range(0, 10, 3)], fontsize=7)
        ax.set_title(s["packer"], fontsize=9)
        if i + cols >= n:  # the lowest panel of its column
            ax.set_xlabel("position in source", fontsize=8)
        if i % cols == 0:
            ax.set_ylabel("source length (tokens)", fontsize=8)
    fig.colorbar(im, ax=flat[:n].tolist(), shrink=0.8 if rows == 1 else 0.5, label="emitted share")
    fig.suptitle(_wrap("Position exposure: which tenths of each source's positions the rows contain", fig, 10), fontsize=10)
    _write(fig, path)


PACKERS_PER_ROW = 12  # more packers than this: another row of bars, so the figure stays readable unzoomed


def comparison(comp, path):
    """Stacked shares per packer (emitted / discarded / buffered of arrived tokens) and padding; a row of at most
    PACKERS_PER_ROW packers, one under another (the main job's 24 in one row made a figure 2,700 pixels wide)."""
    names = list(comp["packers"])
    rows = [comp["packers"][n] for n in names]
    groups = [list(range(i, min(i + PACKERS_PER_ROW, len(names)))) for i in range(0, len(names), PACKERS_PER_ROW)] or [[]]
    fig, axes = plt.subplots(len(groups), 1, squeeze=False, layout="constrained",
                             figsize=(max(7, 0.9 * len(groups[0]) + 3), 4.6 * len(groups)))
    docs = all(r.get("long_documents_never_started") is not None and r.get("long_documents_arrived") is not None
               for r in rows)  # documents, each once; arrivals only where some packer has no fate table
    for ax, group in zip(axes[:, 0], groups):
        comparison_bars(ax, [names[i] for i in group], [rows[i] for i in group], docs)
        ax.set_ylabel("share of arrived tokens (%)")
    budget = rows[0].get("budget_rows", rows[0]["rows"]) if rows else 0
    short = [n for n, r in zip(names, rows) if not r.get("budget_reached", True)]
    title = (f"Packers at a budget of {budget:,} rows" if not short else
             f"Packers with a budget of {budget:,} rows; {', '.join(short)} stopped short (rows made in red)")
    what = "documents > R never started / arrived" if docs else "arrivals of sources > R never started / arrived"
    axes[-1, 0].set_xlabel("packer")
    _save(fig, axes[0, 0], title + f"\n(above each bar: {what})", None, "share of arrived tokens (%)", path)


def comparison_bars(ax, names, rows, docs):
    """One row of comparison's bars: the shares stacked, the padding, and the long documents' counts above."""
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    for key, label, color in (("emitted_share", "emitted", "tab:green"), ("discarded_share", "discarded", "tab:red"),
                              ("buffered_share", "buffered at the horizon", "tab:blue")):
        v = np.array([100 * r[key] for r in rows])
        ax.bar(x, v, 0.6, bottom=bottom, label=label, color=color)
        bottom += v
    ax.plot(x, [100 * r["padding_share"] for r in rows], "k^", label="padding (share of row capacity)")
    for xi, r in zip(x, rows):
        short = "" if r.get("budget_reached", True) else f"\n{r['rows']:,} rows!"
        never, arrived = ((r["long_documents_never_started"], r["long_documents_arrived"]) if docs else
                          (r["long_never_started"], r["long_arrived"]))
        ax.text(xi, 101, f"{never:,}/{arrived:,}{short}", ha="center", va="bottom",
                fontsize=7, color="black" if not short else "tab:red")
    ax.set_xticks(x, names, rotation=30, ha="right", fontsize=8)
    spare = max(0, 3 - len(names)) / 2  # one or two packers: bars of the usual width, not the whole axis
    ax.set_xlim(-0.5 - spare, len(names) - 0.5 + spare)
    ax.set_ylim(0, 118)


def startup_delay(perm, paper_range, path):
    """First emission of a source longer than R under each seeded arrival-order permutation; when no
    permutation (and not the corpus order) emits one within the budget, a panel that says so."""
    delays = [d for d in perm["delays"] if d is not None]
    title = (f"Startup delay over {perm['count']} permutations (paper: {paper_range[0] / 1e6:.2f}–"
             f"{paper_range[1] / 1e6:.2f} M targets at its scale)")
    if not delays and perm.get("unpermuted") is None:
        fig, ax = plt.subplots(figsize=(7.5, 3.2), layout="constrained")
        ax.set_title(_wrap(title, fig))
        _text_panel(ax, f"Nothing to plot: under none of the {len(perm['delays'])} arrival-order permutations, nor in "
                        "the corpus order, was a source longer than R emitted within the budget.", width=72)
        _write(fig, path)
        return
    fig, ax = plt.subplots(figsize=(10, 3.8), layout="constrained")
    seeds = [s for s, d in zip(perm["seeds"], perm["delays"]) if d is not None]
    ax.scatter(np.array(delays) / 1e6, seeds, color="tab:blue", s=28, label=f"permuted arrival order ({len(delays)})")
    if perm.get("unpermuted") is not None:
        ax.axvline(perm["unpermuted"] / 1e6, color="tab:red", lw=1.6, label="corpus order (unpermuted)")
    never = len(perm["delays"]) - len(delays)
    if never:
        ax.text(0.99, 0.02, f"{never} permutation(s): no long source emitted within the budget",
                transform=ax.transAxes, ha="right", fontsize=8)
    ax.set_yticks(perm["seeds"][:: max(1, len(perm["seeds"]) // 10)])
    _save(fig, ax, title, "targets before the first long-source emission (millions)", "permutation seed", path)


def pass_bounds(ours, paper, B, path):
    """Earliest possible pass by length threshold: ours (this stream) and the paper's, on log axes."""
    fig, ax = plt.subplots(figsize=(10, 4.2), layout="constrained")
    if ours:
        ax.plot([r["length_at_least"] for r in ours], [r["earliest_possible_pass"] for r in ours], "o-",
                color="tab:blue", label=f"this stream, B = {B:,}")
    ax.plot([r[0] for r in paper], [r[2] for r in paper], "s--", color="tab:gray", label="the paper (ClimbMix, B = 1,000)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.grid(alpha=0.3, which="both")
    _save(fig, ax, "Repeated-corpus bound: earliest pass a source can start", "original length at least (tokens; log scale)",
          "earliest possible pass (log scale)", path)
