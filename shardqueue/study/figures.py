"""The queue study's figures, drawn from the study summary (records/study.py SCHEMA).

selection.png       selection loss against D (targets trained after the shared start): each
                    seed's reference points of arm A, the monotone reference curve, and the
                    final point of every arm and seed.
control_b.png       arm B's control losses per domain against D, one panel per seed on
                    shared axes (both start at D = 0, the shared start); flags and
                    rejections are drawn on every domain in that domain's colour, the shape
                    giving the decision; acceptances are ticks on a strip along the bottom.
screen_vs_rise.png  the forward-only screen score before training against the measured rise
                    after training (largest per-domain rise over its threshold), per judged
                    candidate of arm B, coloured by what the shard holds.
compute.png         wall seconds per run: training kept, training wasted (rolled back),
                    measurement/screening/checkpoints, arm A's reference branches.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ARM_STYLE = {"A": ("tab:blue", "o"), "B": ("tab:red", "s"), "C": ("tab:green", "^")}
# final points, largest drawn first: arms that end at the same point (no rejection: the same run) stay visible, nested
ARM_SIZE = {"A": 15, "B": 11, "C": 7}
SEED_FILL = ("full", "none")  # first seed filled, every other seed hollow
SHAPES = {"flag": ("^", "flagged"), "recovered": ("D", "flag recovered, accepted"), "reject": ("X", "rejected"),
          "decay": ("*", "after decay")}
KIND_COLOURS = {"clean": "tab:gray", "cipher": "black", "prose": "tab:purple", "mojibake": "tab:red",
                "boilerplate": "tab:orange", "line_shuffle": "tab:blue", "truncate": "tab:green"}


def selection_figure(summary, path):
    fig, ax = plt.subplots(figsize=(10.5, 5))
    seeds = summary["adoption"]["seeds"]
    ref = summary["reference_curve"]
    for i, s in enumerate(seeds):
        c = ref["per_seed"].get(str(s))
        if c:
            ax.plot(c["D"], c["L"], marker="o", fillstyle=SEED_FILL[min(i, 1)], color="tab:blue", alpha=0.55, lw=0.8,
                    ls="-" if i == 0 else ":",
                    label=f"A seed {s}: decay branches (raw points)" if i < 2 else None)
    ax.plot(ref["D"], ref["L"], color="navy", lw=2.2, ls="--", label="monotone fit of every seed's points")
    named = set()
    for r in sorted(summary["runs"], key=lambda r: -ARM_SIZE[r["arm"]]):
        col, mk = ARM_STYLE[r["arm"]]
        i = min(seeds.index(r["seed"]), 1)
        lab = (r["arm"], i)
        ax.plot([r["trained_targets"]], [r["final_selection"]["mean"]], marker=mk, ms=ARM_SIZE[r["arm"]], color=col,
                fillstyle=SEED_FILL[i], ls="none", markeredgewidth=1.5,
                label=None if lab in named else f"{r['arm']} final, seed {r['seed']}" + ("" if i == 0 else " and later"))
        named.add(lab)
    ax.set_xscale("log")
    ax.set_title("Selection axis after the final decay: loss against D")
    ax.set_xlabel("D: targets trained after the shared start (log scale)")
    ax.set_ylabel("selection loss (bits per byte, domain mean)")
    # beside the axes: inside, wherever it sat, it covered final points (a corpus whose runs end high and late)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def control_figure(summary, path):
    runs = [r for r in summary["runs"] if r["arm"] == "B"]
    cols = min(2, len(runs))
    rows = -(-len(runs) // cols)
    fig, grid = plt.subplots(rows, cols, figsize=(6.8 * cols, 4.8 * rows), squeeze=False, sharex=True, sharey=True)
    axes = [[ax for row in grid for ax in row]]
    for ax in axes[0][len(runs):]:
        ax.set_visible(False)
    cmap = plt.get_cmap("tab10")
    for ax, r in zip(axes[0], runs):
        trace = r["control_trace"]
        if not trace:
            continue
        x0 = trace[0]["D"]  # the shared start: every panel starts at 0
        doms = sorted(trace[0]["losses"])
        for j, d in enumerate(doms):
            # the line follows the model's history: after a rollback it jumps back to the restored state
            ax.plot([t["D"] - x0 for t in trace], [t["losses"][d] for t in trace], color=cmap(j), lw=1, label=d)
        seen = set()
        strip = ax.get_xaxis_transform()
        for t in trace:
            if t["mark"] == "accept":
                ax.plot([t["D"] - x0], [0.02], "|", color="black", ms=7, transform=strip,
                        label=None if "accept" in seen else "accepted (tick on the bottom strip)")
                seen.add("accept")
                continue
            if t["mark"] not in SHAPES:
                continue
            mk, lab = SHAPES[t["mark"]]
            for j, d in enumerate(doms):
                ax.plot([t["D"] - x0], [t["losses"][d]], marker=mk, color=cmap(j), ms=7, ls="none",
                        markeredgecolor="black", markeredgewidth=0.5)
            ax.plot([], [], marker=mk, color="lightgray", markeredgecolor="black", ls="none",
                    label=lab if t["mark"] not in seen else None)
            seen.add(t["mark"])
            if t["mark"] == "reject":
                ax.axvline(t["D"] - x0, color="tab:red", lw=0.8, ls=":")
        ax.set_title(f"Arm B seed {r['seed']}: control losses and decisions")
        ax.set_xlabel("D: targets in the model's history since the shared start\n(red dotted: rejected, rolled back)")
        ax.set_ylabel("control loss (bits per byte)")
    # one legend for both panels: a decision seen at one seed only must still be named
    handles = {}
    for ax in axes[0]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    axes[0][cols - 1].legend(handles.values(), handles.keys(), fontsize=7, loc="upper left",
                             bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def screen_figure(summary, path):
    pts = summary["answers"]["screen"]["points"]
    fig, ax = plt.subplots(figsize=(7.5, 5))
    for kind, col in KIND_COLOURS.items():
        sel = [p for p in pts if p.get("kind", "clean") == kind]
        if not sel:
            continue
        for rej, mk in ((False, "o"), (True, "X")):
            q = [p for p in sel if p["rejected"] == rej]
            if q:
                ax.plot([p["score"] for p in q], [p["rise"] for p in q], marker=mk, ls="none", color=col, ms=7 if rej else 5,
                        alpha=0.8, label=f"{kind}" + (" (rejected)" if rej else ""))
    ax.axhline(1.0, color="tab:red", lw=0.8, ls=":", label="flag threshold (rise = k x sigma_d)")
    sc = summary["answers"]["screen"]
    rho = sc["spearman_score_vs_rise"]
    ax.set_title(f"Screen before training against measured rise after it (n = {sc['n']}, "
                 f"Spearman {'n/a' if rho is None else f'{rho:+.2f}'})", fontsize=10)
    ax.set_xlabel("screen score: shard BPB minus pool-sample BPB before training (bits per byte)")
    ax.set_ylabel("largest control-loss rise after training / k x sigma_d")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def compute_figure(summary, path):
    comp = summary["answers"]["compute"]
    names = sorted(comp)
    parts = (("train_kept_s", "training kept", "tab:blue"), ("train_wasted_s", "training wasted (rolled back)", "tab:red"),
             ("measure_screen_other_s", "measurement, screening, checkpoints, setup", "tab:gray"),
             ("reference_branches_s", "arm A's reference branches", "tab:cyan"))
    fig, ax = plt.subplots(figsize=(max(8, 0.3 * len(names)) + 3, 4.6), layout="constrained")  # + the legend
    bottom = [0.0] * len(names)
    for key, lab, col in parts:
        vals = [comp[n][key] for n in names]
        ax.bar(names, vals, bottom=bottom, color=col, label=lab)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.tick_params(axis="x", labelrotation=90, labelsize=8)  # thirty runs' names side by side would overlap
    ax.set_ylim(0, 1.1 * max(bottom, default=0) or 1)  # headroom over the tallest bar
    ax.set_title("Compute per run: wall seconds by kind of work")
    ax.set_xlabel("run (arm and seed)")
    ax.set_ylabel("wall seconds")
    # right of the axes, never over a bar
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.savefig(path, dpi=110)  # constrained layout keeps the legend on the canvas: no second, measuring draw
    plt.close(fig)
