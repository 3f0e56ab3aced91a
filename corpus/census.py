"""Length census: every document's BOS-inclusive length, and the corpus histogram.

The histogram is a `length,count` CSV that checkers/check_length_histogram.py reads.
"""
import numpy as np

from corpus.atomic import atomic_write_json, atomic_write_text


def histogram_csv(lengths) -> str:
    vals, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    return "length,count\n" + "".join(f"{v},{c}\n" for v, c in zip(vals.tolist(), counts.tolist()))


def summarize(lengths, row_capacity=2049) -> dict:
    lengths = np.asarray(lengths, dtype=np.int64)
    return {
        "documents": int(len(lengths)),
        "tokens": int(lengths.sum()),
        "longest": int(lengths.max()) if len(lengths) else 0,
        "median": float(np.median(lengths)) if len(lengths) else 0.0,
        "over_row_capacity": int((lengths > row_capacity).sum()),
        "share_over_row_capacity": float((lengths > row_capacity).mean()) if len(lengths) else 0.0,
        "row_capacity": row_capacity,
    }


def write_census(out_dir, split_lengths: dict, row_capacity=2049) -> dict:
    """split_lengths: {"train": array, "val": array}. Writes CSV histograms and census.json."""
    summary = {}
    for split, lengths in split_lengths.items():
        atomic_write_text(out_dir / f"{split}_length_histogram.csv", histogram_csv(lengths))
        summary[split] = summarize(lengths, row_capacity)
    atomic_write_json(out_dir / "census.json", summary)
    return summary
