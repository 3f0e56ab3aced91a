"""The probe: before the first task of a Ray run, one small task on every node checks what the tasks will find
there, and a node that would run other code, read another corpus or write where the driver cannot look is
refused in one line naming it, before any compute.

    the checkout   the node imports the project from the driver's folder, at the driver's commit, with a clean
                   tree or the same uncommitted changes (git status, diff and untracked files, hashed)
    the reads      every path the tasks read is readable there
    the corpus     each prepared corpus's prepared.json is readable there and records the driver's build id
    the writes     the node writes a token file into each folder the tasks write; the driver reads it back

The node side (node_report) and the driver side (Needs.of, problem, token_problem) are plain functions: the
engine runs the first as a task pinned to each node and compares on the driver.
"""
import hashlib
import json
import os
import secrets
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from errors import DataError

ROOT = Path(__file__).resolve().parents[1]  # the checkout this process imported the project from
GIT_S = 20
SKIP = {".git", ".venv", "__pycache__", "runs", "build", "mutants", ".hypothesis"}  # the digest without git


@dataclass(frozen=True)
class Needs:
    """What every node must see as the driver sees it: the checkout, the reads, each prepared corpus's build id,
    the folders written into; `token` names this probe's files."""
    root: str
    checkout: dict
    reads: tuple = ()
    builds: tuple = ()  # ((folder, build id), ...)
    writes: tuple = ()
    token: str = ""

    @classmethod
    def of(cls, reads=(), prepared=(), writes=()):
        """The needs, read on the driver (which makes the folders written into): paths as the tasks name them."""
        builds = tuple((folder, build_id(folder)) for folder in sorted(set(prepared)))  # the driver's own, or one line
        writes = tuple(sorted(set(writes)))
        for w in writes:
            Path(w).mkdir(parents=True, exist_ok=True)
        return cls(str(ROOT), checkout_identity(), tuple(sorted(set(reads))), builds, writes, secrets.token_hex(6))


def build_id(folder) -> str:
    path = Path(folder) / "prepared.json"
    try:
        rec = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"{path}: corpus not prepared (run prepare.py)") from None
    except (OSError, ValueError) as e:
        raise DataError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or type(e).__name__})") from None
    return str(rec.get("build_id")) if isinstance(rec, dict) else ""


def git(root, *args) -> bytes:
    # --no-optional-locks: a status on a checkout that several nodes share must not write its index
    return subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True, check=True,
                          timeout=GIT_S).stdout


def checkout_identity(root=ROOT) -> dict:
    """{commit, changes, files}: the commit checked out and a digest of the uncommitted changes ("" when clean,
    files: how many paths differ); without git, commit None and a digest of the checkout's Python files."""
    try:
        commit = git(root, "rev-parse", "HEAD").decode().strip()
        status = git(root, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    except (OSError, subprocess.SubprocessError) as e:
        why = "git not found" if isinstance(e, FileNotFoundError) else "not a git checkout"
        return {"commit": None, "changes": source_digest(root), "files": 0, "why": why}
    if not status:
        return {"commit": commit, "changes": "", "files": 0}
    h = hashlib.sha256(git(root, "diff", "HEAD", "--binary"))
    entries = [e for e in status.split(b"\0") if e]
    for e in entries:
        if e.startswith(b"?? "):  # an untracked file: its path and its bytes
            h.update(e)
            with open(Path(root) / os.fsdecode(e[3:]), "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
    return {"commit": commit, "changes": h.hexdigest()[:16], "files": len(entries)}


def source_digest(root) -> str:
    h = hashlib.sha256()
    for folder, subs, files in os.walk(root):
        subs[:] = sorted(d for d in subs if d not in SKIP)
        for name in sorted(f for f in files if f.endswith(".py")):
            p = Path(folder) / name
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def node_report(needs, node_id) -> dict:
    """On a node: what it sees of the needs (the checkout it imports, the unreadable reads, each corpus's build
    id or why not, each written folder's token file or why not)."""
    builds = {}
    for folder, _ in needs.builds:
        try:
            builds[folder] = build_id(folder)
        except DataError as e:
            builds[folder] = f"!{e}"
    wrote = {}
    for w in needs.writes:
        path = Path(w) / token_name(needs, node_id)
        try:
            path.write_text(node_id)
            wrote[w] = str(path)
        except OSError as e:
            wrote[w] = f"!{e.strerror or type(e).__name__}"
    return {"host": socket.gethostname(), "root": str(ROOT), "checkout": checkout_identity(),
            "unreadable": [p for p in needs.reads if not os.access(p, os.R_OK)], "builds": builds, "wrote": wrote}


def token_name(needs, node_id):
    return f".fanout-probe-{needs.token}-{node_id[:12]}"


def described(c) -> str:
    if c["commit"] is None:
        return f"no commit ({c.get('why', 'no git')}), sources {c['changes']}"
    return f"commit {c['commit'][:12]}, " + (f"{c['files']} uncommitted changes ({c['changes']})" if c["changes"]
                                             else "clean")


def problem(needs, node, rep):
    """The first thing `node` (its label) sees otherwise than the driver, in one line, or None."""
    if rep["root"] != needs.root:
        return (f"{node} imports the project from {rep['root']}, the driver from {needs.root}: put the checkout at "
                "the same path on every node, and start Ray there from the project's venv")
    mine, theirs = needs.checkout, rep["checkout"]
    if (mine["commit"], mine["changes"]) != (theirs["commit"], theirs["changes"]):
        return (f"{node}: its checkout {needs.root} is at {described(theirs)}; the driver's is at {described(mine)}: "
                "check out the driver's commit (with the same changes, or none) on every node")
    if rep["unreadable"]:
        return (f"{node} cannot read {rep['unreadable'][0]}: every node must see the prepared corpus and the "
                "folders the driver names, at the driver's absolute paths")
    for folder, want in needs.builds:
        got = rep["builds"].get(folder, "!not checked")
        if got.startswith("!"):
            return f"{node}: {got[1:]}: every node must see the driver's prepared corpus at {folder}"
        if got != want:
            return (f"{node}: {folder}/prepared.json records build {got}, the driver's records {want}: every node "
                    "must read the corpus the driver prepared (one shared data root, as an absolute path)")
    for w, made in rep["wrote"].items():
        if made.startswith("!"):
            return (f"{node} cannot write in {w} ({made[1:]}): --out must be a folder every node shares and can "
                    "write, at the same absolute path")
    return None


def token_problem(needs, node, node_id):
    """The driver reads back the token file `node` wrote into each written folder (and removes it), or one line."""
    for w in needs.writes:
        path = Path(w) / token_name(needs, node_id)
        try:
            seen = path.read_text()
            path.unlink()
        except OSError:
            seen = None
        if seen != node_id:
            return (f"{node} wrote {path} but the driver cannot see it: --out must be on storage every node shares "
                    "(one file system, at the same absolute path)")
    return None
