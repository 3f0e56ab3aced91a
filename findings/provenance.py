"""The provenance table of the findings page (SUMMARY.md): what ran, from records/provenance.py's facts."""


def to_md(p) -> list:
    dirty = {True: " (working tree had uncommitted changes)", False: " (clean)", None: ""}[p["git_dirty"]]
    stages = ", ".join(f"{k} {v:,.0f} s" for k, v in p["stage_seconds"]) or "not recorded (no stage_times.json)"
    folders = ", ".join(f"`{f}`" for f in p["run_folders"])  # the run folder and result folders outside it
    rows = [("code", f"git {p['git_commit']}{dirty}"),
            ("software", f"Python {p['python']}, torch {p['torch']}, numpy {p['numpy']} ({p['platform']})"),
            ("hardware", f"CPU: {p['cpu']}; GPU: {', '.join(p['gpus']) or 'none'}"),
            ("corpus", f"{p['corpus_source']}, build id {p['corpus_build_id'] or 'unknown (not prepared here)'}"
                       + (f" (the offline corpus is this Python's standard library: Python {p['python']})"
                          if p["corpus_source"] == "stdlib" else "")),
            ("date", p["date_utc"]),
            ("wall time per stage", stages),
            ("run folder size", f"{p['run_folder_bytes'] / 1e6:,.1f} MB (of {folders})")]
    return ["## Provenance: what ran", "", "| | |", "|---|---|", *[f"| {a} | {b} |" for a, b in rows], ""]
