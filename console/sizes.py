"""A number of bytes as a line of output states it."""


def size(n):
    """Bytes as TB, GB, MB or KB (of 1,024), one decimal."""
    for unit, k in (("TB", 4), ("GB", 3), ("MB", 2)):
        if n >= 1024 ** k:
            return f"{n / 1024 ** k:,.1f} {unit}"
    return f"{n / 1024:,.1f} KB"
