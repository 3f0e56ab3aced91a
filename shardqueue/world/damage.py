"""Realistic damage to real documents, applied to the text before the corpus tokenizer sees it.

The proposal "Can a model help choose its next training data?" asks whether the queue
catches bad data that occurs in web-scale pretraining pools, not only a planted cipher.
Each entry of DAMAGES is `f(text, rng) -> str`: it takes one real document and a
`random.Random` and returns the damaged document. Every kind keeps the document's own
material (nothing is invented from nothing except the boilerplate's templates), so a
shard built from damaged documents is an ordinary-size shard of a plausible crawl.

    mojibake      the document's bytes written in one encoding and read in another:
                  UTF-16 read as Latin-1 (a NUL between characters, as in mis-read
                  Windows exports) for ASCII text, where a UTF-8/cp1252 mix-up changes
                  nothing; otherwise UTF-8 read as cp1252 ("Ã©" for "é"), sometimes twice.
    boilerplate   templated page furniture (navigation, cookie notice, share buttons,
                  copyright footer, "related posts") wrapped around and between the
                  document's paragraphs, about as many characters as the text itself.
    line_shuffle  the document's lines in a random order (a broken extractor that
                  loses reading order).
    truncate      a fragment: a random window of 10-40% of the document, cut mid-word
                  at both ends (a capture stopped by a byte limit or a dropped
                  connection).

The dose of a shard is the share of its documents (and of its tokens) that went through
one of these; shards mix a kind with clean text at any dose from 0 to 100%.
"""

_SITES = ("devnotes", "codehub", "pyforum", "techdaily", "snippetbase", "learnhub")
_NAV = ("Home", "About", "Blog", "Docs", "Forum", "Contact", "Login", "Sign up", "Search", "Archives", "Tags")
_TEMPLATES = (
    "{nav}",
    "Skip to main content",
    "We use cookies to improve your experience on {site}.com. By continuing you agree to our Cookie Policy. Accept",
    "Share this: Facebook | Twitter | LinkedIn | Reddit | Email",
    "Posted by admin on {month} {day}, {year} in Uncategorized | {n} Comments",
    "Related posts: {site} weekly digest #{n} | Top {day} tips for {year}",
    "Subscribe to our newsletter to get the latest updates from {site}.",
    "Copyright (c) {year} {site}.com. All rights reserved. | Privacy Policy | Terms of Use",
    "Leave a Reply. Your email address will not be published. Required fields are marked *",
    "Advertisement",
    "Page {n} of {m} | Next >> | Last",
)
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


def mojibake(text, rng):
    if text.isascii():
        # only a non-ASCII-compatible encoding can break ASCII text
        codec = rng.choice(("utf-16-le", "utf-16-be"))
        return text.encode(codec).decode("latin-1")
    out = text
    for _ in range(rng.choice((1, 1, 2))):  # double mis-decoding happens when a broken page is re-saved
        out = out.encode("utf-8").decode("cp1252", errors="replace")
    return out


def _furniture(rng, site, year):
    t = rng.choice(_TEMPLATES)
    return t.format(nav=" | ".join(rng.sample(_NAV, rng.randint(4, 8))), site=site, year=year,
                    month=rng.choice(_MONTHS), day=rng.randint(1, 28), n=rng.randint(2, 99), m=rng.randint(2, 20))


def boilerplate(text, rng):
    site, year = rng.choice(_SITES), rng.randint(2009, 2024)
    paras = text.split("\n\n")
    budget = len(text)  # about as much furniture as text: half of such a page is template
    out, added = [], 0

    def block(n):
        nonlocal added
        lines = [_furniture(rng, site, year) for _ in range(n)]
        added += sum(len(x) + 1 for x in lines)
        return "\n".join(lines)

    out.append(block(rng.randint(2, 4)))
    for p in paras:
        out.append(p)
        if added < budget * 0.75 and rng.random() < 0.3:
            out.append(block(1))
    while added < budget:
        out.append(block(1))
    return "\n\n".join(out)


def line_shuffle(text, rng):
    lines = text.split("\n")
    rng.shuffle(lines)
    return "\n".join(lines)


def truncate(text, rng):
    n = len(text)
    if n < 20:
        return text
    size = max(1, int(n * rng.uniform(0.10, 0.40)))
    start = rng.randint(1, n - size)  # never the document's own start: a fragment begins mid-stream
    return text[start:start + size]


DAMAGES = {"mojibake": mojibake, "boilerplate": boilerplate, "line_shuffle": line_shuffle, "truncate": truncate}
