"""The proposal's "Polish axis", defined before use: is there one in this corpus?

Rule (fixed here, before any run): a validation document is Polish when at least 1% of
its letters (in its first 4,000 characters) are letters only Polish uses among European
languages (ą ć ę ł ń ś ź ż and capitals; ó is left out, it is common elsewhere), and at
least 60% of its letters are Latin. The axis exists when at least MIN_DOCS documents meet
the rule; otherwise the report declares it absent, with the count.
"""
POLISH = set("ąćęłńśźżĄĆĘŁŃŚŹŻ")
MIN_SHARE = 0.01
MIN_LATIN = 0.6
MIN_DOCS = 16
RULE = (f"a validation document is Polish when at least {MIN_SHARE:.0%} of the letters in its first 4,000 characters "
        f"are Polish-specific (ą ć ę ł ń ś ź ż) and at least {MIN_LATIN:.0%} are Latin; the axis needs {MIN_DOCS} "
        f"such documents")


def is_polish(text):
    letters = [c for c in text[:4000] if c.isalpha()]
    if not letters:
        return False
    latin = sum(ord(c) <= 0x24F for c in letters) / len(letters)
    return latin >= MIN_LATIN and sum(c in POLISH for c in letters) / len(letters) >= MIN_SHARE


def polish_axis(texts):
    """{"present", "documents", "text"}: the axis verdict for these validation texts."""
    docs = [i for i, t in enumerate(texts) if is_polish(t)]
    present = len(docs) >= MIN_DOCS
    text = (f"present: {len(docs)} of {len(texts)} validation documents meet the rule ({RULE}); the study does not "
            f"yet score them as a separate selection axis, so there is no per-axis result." if present else
            f"absent: {len(docs)} of {len(texts)} validation documents meet the rule ({RULE}), fewer than "
            f"{MIN_DOCS}; no Polish or other non-English selection axis is scored in this setting.")
    return {"present": present, "documents": docs, "text": text}
