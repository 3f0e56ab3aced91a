"""frontier.png (audit/sweep.py): crop waste against documents longer than R never started (left, symlog) and
against their last tenth's exposure (right), one point per configuration in its packer's colour.

Points are numbered as the rows of frontier.md and told apart by a key beside the panels (each line in its packer's
colour). Only the Pareto set, the paper's and the current configuration carry their settings beside their number;
the rest carry the number alone. Sweeps put many points at one place (x = 0: the lossless packer, or a buffer so
large it crops almost nothing), so labels are not set at one fixed offset: points at one place share a label, and
each label goes to the nearest spot around its point where it covers no other label and no point (a leader line
when it lands away from it), found in display coordinates once the layout is settled."""
import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

from audit.plots import _wrap, _write, packer_styles  # noqa: E402

FONT = 7  # labels and key, points
RINGS = (8, 14, 22, 32, 44, 58, 74)  # distances tried around a point, in points, nearest first
ANGLES = [math.radians(a) for a in (45, 0, -45, 90, -90, 135, 180, -135, 22, -22, 158, -158, 68, -68, 112, -112)]
LEADER = 12  # a label farther than this (points) from its point gets a line to it
SAME_PLACE = 4.0  # points closer than this (pixels) share one label
PAD = 1.5  # the free margin kept around a label, points
KEY_LINE = 9.5  # the key's line height, points


def frontier(points, front, ref, path):
    """The figure; front: the indices of the Pareto set (outlined in black); the paper's configuration is a star and
    the current one a hollow diamond; points of packers listed earlier are drawn larger, so points that coincide
    show as rings."""
    order = list(dict.fromkeys(p["packer"] for p in points))
    styles = packer_styles(order)
    fig, axes = plt.subplots(1, 3, figsize=(15.5, 5.6), layout="constrained", width_ratios=(1, 1, 0.55))
    panels = ((axes[0], "long_documents_never_started", f"documents longer than {ref:,} never started (symlog)"),
              (axes[1], "last_tenth_exposure", "last tenth of those documents emitted (%)"))
    marks = {}
    for ax, key, ylabel in panels:
        marks[key] = _draw_points(ax, points, front, styles, order, key)
        if key == "long_documents_never_started":
            ax.set_yscale("symlog", linthresh=1)
        ax.set_xlabel("crop waste: tokens discarded / arrived (%)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    legend = _legend(axes[2], styles, order)
    fig.suptitle(_wrap("The frontier: what each configuration discards, against the long documents it never starts and "
                       "how much of their last tenth it trains on", fig))
    fig.canvas.draw()  # the layout settled: the labels and the key are placed in display coordinates, out of it
    renderer = fig.canvas.get_renderer()
    names = frontier_names(points, front, ref)
    for ax, key, _ in panels:
        xy = [ax.transData.transform(m[:2]) for m in marks[key]]
        place_labels(ax, same_place(xy, names), [(x, y, m[2]) for (x, y), m in zip(xy, marks[key])], renderer)
    _key(axes[2], legend, points, ref, styles, renderer)
    _write(fig, path)


def _xy(p, key):
    return 100 * p["crop_waste"], p[key] if key == "long_documents_never_started" else 100 * (p[key] or 0.0)


def _draw_points(ax, points, front, styles, order, key):
    """The points of one panel; returns each one's (x, y, size in points^2) as drawn."""
    out = []
    for i, p in enumerate(points):
        xy, size = _xy(p, key), 150 - 30 * order.index(p["packer"])
        size = 2.2 * size if p["paper"] else size
        ax.scatter(*xy, s=size, marker="*" if p["paper"] else "o", color=styles[p["packer"]]["color"],
                   edgecolor="black" if i in front else "none", linewidth=1.4, zorder=3)
        if p["current"]:
            size = 2.6 * size
            ax.scatter(*xy, s=size, marker="D", facecolor="none", edgecolor="black", zorder=4)
        out.append((*xy, size))
    return out


def _legend(ax, styles, order):
    ax.axis("off")
    for name in order:
        ax.scatter([], [], color=styles[name]["color"], label=name)
    ax.scatter([], [], marker="*", s=120, color="gray", label="the paper's configuration")
    ax.scatter([], [], marker="D", facecolor="none", edgecolor="black", label="the current configuration")
    ax.scatter([], [], color="white", edgecolor="black", label="Pareto set (outlined)")
    return ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 1.0), borderaxespad=0)


def settings(p, ref):
    """A point's settings in short: B, and R and N where they are not the reference R and one rank."""
    return (f"B={p['buffer']:,}" + (f" R={p['row_capacity']:,}" if p["row_capacity"] != ref else "")
            + (f" N={p['ranks']}" if p["ranks"] > 1 else ""))


def frontier_names(points, front, ref):
    """(number, settings or None) of each point: its number is its row of frontier.md; the Pareto set, the paper's
    and the current configuration are named, the rest are found in the key."""
    return [(str(i + 1), f"{settings(p, ref)} {p['packer']}" if i in front or p["paper"] or p["current"] else None)
            for i, p in enumerate(points)]


def same_place(xy, names):
    """[(x, y, text)]: one label for the points drawn within SAME_PLACE pixels of each other: each named one as
    "number: settings", then the others' numbers ("13: B=1,000 original; 16")."""
    groups = []
    for (x, y), member in zip(xy, names):
        g = next((g for g in groups if abs(g[0] - x) <= SAME_PLACE and abs(g[1] - y) <= SAME_PLACE), None)
        if g is None:
            g = [x, y, []]
            groups.append(g)
        g[2].append(member)
    return [(x, y, "; ".join([f"{n}: {name}" for n, name in members if name]
                             + [",".join(n for n, name in members if not name)] * any(not m[1] for m in members)))
            for x, y, members in groups]


def _overlap(a, b):
    """The area two boxes (x0, y0, x1, y1) share."""
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def _box(x, y, w, h, dx, dy):
    """Where a label of w x h pixels goes when set at (x + dx, y + dy), on the side away from its point, and how it
    is aligned there."""
    ha = "left" if dx > 0.3 * abs(dy) else "right" if dx < -0.3 * abs(dy) else "center"
    va = "bottom" if dy > 0.3 * abs(dx) else "top" if dy < -0.3 * abs(dx) else "center"
    x0 = x + dx - {"left": 0, "right": w, "center": w / 2}[ha]
    y0 = y + dy - {"bottom": 0, "top": h, "center": h / 2}[va]
    return (x0, y0, x0 + w, y0 + h), ha, va


def _crosses(seg, box, steps=16):
    """Whether a line segment ((x0, y0), (x1, y1)) passes through a box (sampled: labels are far wider than a step)."""
    (x0, y0), (x1, y1) = seg
    return any(box[0] <= x0 + (x1 - x0) * k / steps <= box[2] and box[1] <= y0 + (y1 - y0) * k / steps <= box[3]
               for k in range(steps + 1))


def _spot(x, y, w, h, taken, markers, frame, scale):
    """The first spot around (x, y), nearest first, whose box covers no label, leader line or point, whose leader
    line (if it needs one) crosses no label, and which stays in the frame; else the one that costs least (labels
    and lines weigh far more than points). taken: {"boxes": [...], "lines": [...]} of the labels placed."""
    best, pad = None, PAD * scale
    for r in RINGS:
        for a in ANGLES:
            dx, dy = r * scale * math.cos(a), r * scale * math.sin(a)
            box, ha, va = _box(x, y, w, h, dx, dy)
            box = (box[0] - pad, box[1] - pad, box[2] + pad, box[3] + pad)  # a margin, so that labels never touch
            line = ((x, y), (x + dx, y + dy)) if r > LEADER else None
            out = (box[0] < frame[0]) + (box[1] < frame[1]) + (box[2] > frame[2]) + (box[3] > frame[3])
            crossed = sum(_crosses(seg, box) for seg in taken["lines"]) + (
                0 if line is None else sum(_crosses(line, t) for t in taken["boxes"]))
            cost = (1e9 * out + 1e3 * sum(_overlap(box, t) for t in taken["boxes"]) + 1e5 * crossed
                    + sum(_overlap(box, m) for m in markers))
            if best is None or cost < best[0]:
                best = (cost, line, dx / scale, dy / scale, box, ha, va)
            if cost == 0:
                return best
    return best


def place_labels(ax, labels, markers, renderer):
    """Each label (x, y in pixels, text) set where _spot finds room, the named ones (longer) first; markers: each
    point's (x, y in pixels, size in points^2). Returns the annotations (out of the layout: it is settled)."""
    scale = ax.figure.dpi / 72
    marker_boxes = [(x - s, y - s, x + s, y + s) for x, y, size in markers for s in [0.5 * math.sqrt(size) * scale]]
    f = ax.get_window_extent(renderer)
    frame, taken, out = (f.x0, f.y0, f.x1, f.y1), {"boxes": [], "lines": []}, []
    for x, y, text in sorted(labels, key=lambda g: ":" not in g[2]):
        probe = ax.text(0, 0, text, fontsize=FONT)
        size = probe.get_window_extent(renderer)
        probe.remove()
        _, line, dx, dy, box, ha, va = _spot(x, y, size.width, size.height, taken, marker_boxes, frame, scale)
        data = ax.transData.inverted().transform((x, y))
        ann = ax.annotate(text, data, xytext=(dx, dy), textcoords="offset points", fontsize=FONT, ha=ha, va=va,
                          zorder=5, arrowprops=None if line is None else
                          dict(arrowstyle="-", lw=0.5, color="0.35", shrinkA=0, shrinkB=3))
        ann.set_in_layout(False)
        taken["boxes"].append(box)
        taken["lines"] += [line] if line else []
        out.append(ann)
    return out


def key_lines(points, ref):
    """The key: each point's number, settings and packer, one line a point."""
    return [f"{i + 1:>3}  {settings(p, ref)} {p['packer']}" for i, p in enumerate(points)]


def _key(ax, legend, points, ref, styles, renderer):
    """The key under the legend, each line in its packer's colour, in as many columns as the room takes; where the
    room cannot hold it, a line says the numbers are frontier.md's rows."""
    scale = ax.figure.dpi / 72
    frame, top = ax.get_window_extent(renderer), legend.get_window_extent(renderer).y0
    lines = key_lines(points, ref)
    probe = ax.text(0, 0, max(lines, key=len), fontsize=FONT, family="monospace")
    width = probe.get_window_extent(renderer).width + 6 * scale
    probe.remove()
    per_column = max(1, int((top - frame.y0) / scale / KEY_LINE) - 4)
    columns = math.ceil(len(lines) / per_column)
    fits = bool(columns * width <= frame.width)
    start = ax.transAxes.inverted().transform((0, top))[1]
    # the head in short lines: the panel is narrow, and nothing out of the layout may run past the figure's edge
    head = ["points, numbered as the rows", "of frontier.md" + (":" if fits else f" ({len(lines)} of them,"),
            *([] if fits else ["too many to list here)"])]
    for n, (text, colour, family) in enumerate([(h, "black", None) for h in head] + [
            (line, styles[p["packer"]]["color"], "monospace") for line, p in zip(lines, points)] * fits):
        col, row = divmod(n - len(head), per_column) if n >= len(head) else (0, n - len(head) - 0.4)
        t = ax.text(col * width / frame.width, start, text, fontsize=FONT, family=family, color=colour, va="top",
                    transform=offset_copy(ax.transAxes, ax.figure, y=-KEY_LINE * (row + len(head) + 1.6),
                                          units="points"))
        t.set_in_layout(False)
