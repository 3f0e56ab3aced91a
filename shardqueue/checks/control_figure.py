"""The control-curve figure of a queue run: every domain's control BPB after each trained shard, with its
flags, rejections, rollbacks and acceptances marked (control_curves.png beside report.md)."""
from io import BytesIO

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from corpus.atomic import atomic_write_bytes  # noqa: E402


def _marked_domain(t):
    """The flagged domain with the largest rise over its threshold; else the highest loss (accepted shards)."""
    th, d = t.get("thresholds") or {}, t.get("deltas") or {}
    measured = [x for x in t.get("flagged", []) if x in d and th.get(x)]
    if measured:
        return max(measured, key=lambda x: d[x] / th[x])
    return max(t["losses"], key=t["losses"].get)


def figure(recs, path):
    trains = [r for r in recs if r["event"] == "train"]
    if not trains:
        return
    doms = sorted(trains[0]["losses"])
    start = recs[0]
    xs = [0] + [r["spent_targets"] for r in trains]
    fig, ax = plt.subplots(figsize=(11.5, 5.5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, d in enumerate(doms):
        ax.plot(xs, [start["losses"][d]] + [r["losses"][d] for r in trains], "-", color=colors[j % 10], lw=1.2, label=d)
    # a flag or rejection is drawn on the domain that exceeded its threshold most, in that domain's own
    # colour (the shape says which decision); an acceptance concerns no single domain, so it is a tick
    # on a strip along the bottom rather than a dot on some domain's line
    shapes = {"flag": ("^", "flagged (on the domain most over its threshold)", 9),
              "reject": ("X", "rejected, rolled back (on that domain)", 10)}
    strip = ax.get_xaxis_transform()
    used, pos, last = set(), {}, None
    for r in recs:  # in log order, so a shard trained twice is marked where each decision happened
        if r["event"] == "train":
            pos[r["shard"]], last = r, r
        kind = ("flag" if r["event"] == "train" and r.get("flagged") else
                r["event"] if r["event"] in ("accept", "reject") else None)
        if kind == "accept":
            ax.plot([pos[r["shard"]]["spent_targets"]], [0.02], "|", color="black", ms=8, transform=strip,
                    label=None if "accept" in used else "accepted (tick on the bottom strip)")
            used.add(kind)
        elif kind:
            t = pos[r["shard"]]
            m, lab, ms = shapes[kind]
            d = _marked_domain(t)
            ax.plot([t["spent_targets"]], [t["losses"][d]], m, color=colors[doms.index(d) % 10], ms=ms,
                    markeredgecolor="black", markeredgewidth=0.6, label=None if kind in used else lab, zorder=3)
            used.add(kind)
        if r["event"] == "rollback":
            ax.axvline(last["spent_targets"], color="red", ls=":", lw=1, label=None if "rb" in used else "rollback")
            used.add("rb")
    ax.set_xlabel("targets trained since the queue started (wasted ones included)")
    ax.set_ylabel("control BPB")
    ax.set_title("Control BPB per domain after every trained shard; a flag or rejection is marked on the domain "
                 "that exceeded its threshold most", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()

    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
