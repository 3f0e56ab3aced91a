"""The queue study's two figures, drawn from the study summary (report.SCHEMA).

selection.png   selection loss against trained targets: arm A's decay branches per seed
                and their seed average (the reference curve), the final points of every
                arm and seed at their trained targets.
control_b.png   arm B's control losses per domain against trained targets, one panel per
                seed, with every decision marked (flag, recovery accepted, reject and the
                rollback it causes, accept).
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ARM_STYLE = {"A": ("tab:blue", "o"), "B": ("tab:red", "s"), "C": ("tab:green", "^")}
SEED_FILL = ("full", "none")  # first seed filled, second hollow
MARKS = {"accept": ("o", "tab:green", "accepted"), "flag": ("^", "tab:orange", "flagged"),
         "recovered": ("D", "tab:olive", "flag recovered, accepted"), "reject": ("X", "tab:red", "rejected"),
         "decay": ("*", "black", "after decay")}


def selection_figure(summary, path):
    fig, ax = plt.subplots(figsize=(8, 4.8))
    seeds = summary["adoption"]["seeds"]
    ref = summary["reference_curve"]
    for i, s in enumerate(seeds):
        c = ref["per_seed"].get(str(s))
        if c:
            ax.plot(c["D"], c["L"], color="tab:blue", alpha=0.45, lw=1, ls="-" if i == 0 else ":",
                    label=f"A seed {s}: decay branches")
    ax.plot(ref["D"], ref["L"], color="tab:blue", lw=2.2, ls="--", label="reference curve (A, seed average)")
    for r in summary["runs"]:
        col, mk = ARM_STYLE[r["arm"]]
        i = seeds.index(r["seed"])
        ax.plot([r["trained_targets"]], [r["final_selection"]["mean"]], marker=mk, ms=10, color=col,
                fillstyle=SEED_FILL[i], ls="none", label=f"{r['arm']} seed {r['seed']} final")
    ax.set_xscale("log")
    ax.set_title("Selection axis after the final decay: loss against trained targets")
    ax.set_xlabel("trained targets (log scale)")
    ax.set_ylabel("selection loss (bits per byte, domain mean)")
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def control_figure(summary, path):
    runs = [r for r in summary["runs"] if r["arm"] == "B"]
    fig, axes = plt.subplots(1, len(runs), figsize=(6.5 * len(runs), 4.6), squeeze=False)
    for ax, r in zip(axes[0], runs):
        trace = r["control_trace"]
        doms = sorted(trace[0]["losses"]) if trace else []
        cmap = plt.get_cmap("tab10")
        for j, d in enumerate(doms):
            # the line follows the model's history: after a rollback it jumps back to the restored state
            ax.plot([t["D"] for t in trace], [t["losses"][d] for t in trace], color=cmap(j), lw=1, label=d)
        seen = set()
        for t in trace:
            if t["mark"] not in MARKS:
                continue
            mk, col, lab = MARKS[t["mark"]]
            for d in doms:
                ax.plot([t["D"]], [t["losses"][d]], marker=mk, color=col, ms=7, ls="none",
                        label=lab if t["mark"] not in seen else None)
                seen.add(t["mark"])
            if t["mark"] == "reject":
                ax.axvline(t["D"], color="tab:red", lw=0.8, ls=":")
        ax.set_title(f"Arm B seed {r['seed']}: control losses and decisions")
        ax.set_xlabel("trained targets in the model's history (red dotted: rejected, rolled back)")
        ax.set_ylabel("control loss (bits per byte)")
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
