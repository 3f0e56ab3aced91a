"""A markdown report as a terminal prints it: a figure's image link becomes one short line naming the file."""
import re

FIGURE_LINK = re.compile(r"^!\[[^\]]*\]\(([^)\s]+)\)[ \t]*$", re.M)


def for_terminal(md: str) -> str:
    """The report with each line that is only an image link replaced by `(figure: FILE)`."""
    return FIGURE_LINK.sub(lambda m: f"(figure: {m.group(1)})", md)
