"""The decision log: one JSON line per event, fsynced, and the replay that rebuilds the queue.

Events that change the queue: rotation (a new rotation starts from the deferred list),
take (a shard leaves the front of the queue), accept, reject (with outcome deferred or
quarantined), return_front (the recovery shard goes back to the front), return (one
return from quarantine). Every event carries the queue state after it, so a reader can
check any prefix; `reconstruct` recomputes the state from the events alone.
"""
import json
import os


class DecisionLog:
    def __init__(self, path, keep_until=None):
        self.path = path
        events = read_log(path) if os.path.exists(path) else []
        if keep_until is not None:  # resuming: drop what happened after the restored checkpoint
            events = [e for e in events if e["seq"] <= keep_until]
            with open(path, "w") as f:
                f.writelines(json.dumps(e, sort_keys=True) + "\n" for e in events)
        self.seq = events[-1]["seq"] if events else 0

    def write(self, event: dict):
        self.seq += 1
        event = {"seq": self.seq, **event}
        with open(self.path, "a") as f:
            f.write(json.dumps(event, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return event


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def reconstruct(order, events):
    """Queue state from the rotation order and the events alone."""
    pending, nxt, quarantined, accepted, rejections, returns = list(order), [], [], [], {}, {}
    rotation = 0
    for e in events:
        kind = e["event"]
        if kind == "rotation":
            pending, nxt, rotation = list(nxt), [], rotation + 1
        elif kind == "take":
            if not pending or pending[0] != e["shard"]:
                raise ValueError(f"event {e['seq']}: takes {e['shard']} but the front is {pending[:1]}")
            pending.pop(0)
        elif kind == "accept":
            accepted.append(e["shard"])
        elif kind == "reject":
            s = e["shard"]
            rejections[s] = rejections.get(s, 0) + 1
            (nxt if e["outcome"] == "deferred" else quarantined).append(s)
        elif kind == "return_front":
            pending.insert(0, e["shard"])
        elif kind == "return":
            quarantined.remove(e["shard"])
            returns[e["shard"]] = returns.get(e["shard"], 0) + 1
            nxt.append(e["shard"])
    return {"pending": pending, "next_rotation": nxt, "quarantined": quarantined, "accepted": accepted,
            "rejections": rejections, "returns": returns, "rotation": rotation}
