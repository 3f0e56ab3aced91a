"""What a queue run's start record fixes beyond its arguments, and how the present differs from it.

The start record is the first link of the decision log's hash chain, so whatever it holds is
part of what the chain protects. Besides the run's arguments (seed, policy, budget, ...) it
holds:
  config        the calibration folder's config.json as the run used it (micro_rows, eval_rows,
                muon_lr, ...), key by key
  calibration_sha256  a SHA256 per key of calibration.json (k, sigma, the calibrated state's
                SHA256, the plan's settings, ...): an edit of any key is named without the
                record repeating the file
  machine       the machine the run was made on (Python, torch, numpy, the CPU, the device;
                records/provenance.py): re-execution is expected to be bitwise only on that machine

`settings_differences` names every key of config.json and calibration.json that differs from
the start record; resume refuses them, so the files in the calibration folder cannot misstate
a run that continues.
"""
import hashlib
import json

from records.provenance import machine

# config keys that say where things lie, not what the run computes: the corpus itself is checked by
# its identity (build id, tokenizer SHA256), so a moved data folder still resumes
LOCATION_KEYS = ("data_dir",)
# the run's seed replaces the config's (run --seed) and is compared as a field of its own
RUN_KEYS = ("seed",)


def value_sha256(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def calibration_digests(calib: dict) -> dict:
    """{key: SHA256 of its canonical JSON} of a calibration record (calibration.json as loaded)."""
    return {k: value_sha256(v) for k, v in sorted(calib.items())}


def start_settings(cfg, calib, device) -> dict:
    """The start record's fields that pin the calibration folder's settings and the machine."""
    return {"config": cfg.to_dict(), "calibration_sha256": calibration_digests(calib), "machine": machine(device)}


def settings_differences(start: dict, cfg, calib: dict) -> list:
    """Lines naming each config.json and calibration.json key that differs from the start record
    (a record without them, written by an older version, is one line)."""
    if "config" not in start or "calibration_sha256" not in start:
        return ["config.json and calibration.json (the start record does not hold them: an older version wrote it)"]
    then, now = start["config"], cfg.to_dict()
    skip = LOCATION_KEYS + RUN_KEYS
    out = [f"config.json {k} ({then.get(k)!r} when the run started, {now.get(k)!r} now)"
           for k in sorted(set(then) | set(now)) if k not in skip and then.get(k) != now.get(k)]
    then, now = start["calibration_sha256"], calibration_digests(calib)
    out += [f"calibration.json {k} (its SHA256 differs from the start record's)"
            for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]
    return out
