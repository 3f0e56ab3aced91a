"""The audit's source-length strata (BOS-inclusive, inclusive upper bounds), as in the paper's tables."""
import numpy as np

STRATA = (32, 128, 512, 1024, 2049, 4096, 8192, 16384)


def stratum_labels(bounds=STRATA):
    labels, lo = [], 1
    for b in bounds:
        labels.append(f"{lo}-{b}")
        lo = b + 1
    labels.append(f">{bounds[-1]}")
    return labels


def stratum_of(lengths, bounds=STRATA):
    return np.searchsorted(np.asarray(bounds), lengths, side="left")
