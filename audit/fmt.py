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
