"""Number formats and Markdown tables shared by the audit's report and comparison."""


def fmt(x):
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    if isinstance(x, float):
        return f"{x:.4f}"
    return f"{x:,}"


def pct(x):
    return "n/a" if x is None else f"{100 * x:.2f}%"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    return out + ["| " + " | ".join(map(str, r)) + " |" for r in rows]


# a label column with a value per document (an id, a URL) would fill pages and draw a figure 150,000 pixels wide:
# the tables and the figure show this many, the labels with the most documents (the first screen's) or arrivals (the
# per-label coverage tables and figure); every label stays in summary.json
LABELS_SHOWN = 30


def shown_labels(rows, count):
    """(rows, how many are left out): every row where there are at most LABELS_SHOWN, else the LABELS_SHOWN with the
    largest count(row) (documents, or arrivals; the first on a tie), in their order."""
    if len(rows) <= LABELS_SHOWN:
        return list(rows), 0
    keep = set(sorted(range(len(rows)), key=lambda i: -count(rows[i]))[:LABELS_SHOWN])
    return [r for i, r in enumerate(rows) if i in keep], len(rows) - LABELS_SHOWN


def left_out_line(n, where, counted="documents"):
    return f"{n:,} more labels, none with more {counted} than those shown, are left out here; every label is in {where}."
