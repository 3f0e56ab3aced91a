"""Install anywhere: the torch build run.sh derives per platform and choice, the wheel's metadata,
and one Python requirement across run.sh, pyproject.toml and the README."""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("torch_requirement", ROOT / "install" / "torch_requirement.py")
tr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tr)

CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@pytest.mark.parametrize("system, choice, gpu, want", [
    ("Linux", "cpu", False, ("torch==2.13.0+cpu", CPU_INDEX)),
    ("Linux", "auto", False, ("torch==2.13.0+cpu", CPU_INDEX)),
    ("Linux", "auto", True, ("torch==2.13.0", None)),
    ("Linux", "cuda", False, ("torch==2.13.0", None)),
    ("Linux", "cu126", False, ("torch==2.13.0+cu126", "https://download.pytorch.org/whl/cu126")),
    ("Darwin", "cpu", False, ("torch==2.13.0", None)),
    ("Darwin", "auto", False, ("torch==2.13.0", None)),
])
def test_torch_requirement_per_platform_and_choice(system, choice, gpu, want):
    assert tr.derive(system, choice, gpu) == want


@pytest.mark.parametrize("system, choice", [("Darwin", "cuda"), ("Darwin", "cu126"), ("Linux", "rocm"), ("Linux", "cu")])
def test_impossible_choice_is_refused(system, choice):
    with pytest.raises(tr.ChoiceError):
        tr.derive(system, choice)


def test_unreachable_index_falls_back_to_the_default_index_with_a_note():
    req, index, note = tr.with_fallback("torch==2.13.0+cpu", CPU_INDEX, reachable=lambda url: False)
    assert (req, index) == ("torch==2.13.0", None)
    assert CPU_INDEX in note and "\n" not in note and "carries CUDA: several GB" in note  # a CPU build was asked for
    assert "CUDA" not in tr.with_fallback("torch==2.13.0+cu126", "https://x/cu126", reachable=lambda url: False)[2]
    assert tr.with_fallback("torch==2.13.0+cpu", CPU_INDEX, reachable=lambda url: True) == ("torch==2.13.0+cpu", CPU_INDEX, None)


def test_bad_choice_is_one_line_and_status_2():
    p = subprocess.run([sys.executable, str(ROOT / "install" / "torch_requirement.py"), "--choice", "rocm"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stdout == "" and len(p.stderr.strip().splitlines()) == 1


def test_one_python_requirement_everywhere():
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["project"]["requires-python"] == ">=3.11"
    assert "sys.version_info < (3, 11)" in (ROOT / "run.sh").read_text()
    assert re.search(r"Python ≥ 3\.11|Python 3\.11\s+or newer", (ROOT / "README.md").read_text())  # wrapped lines too


def test_every_package_of_the_checkout_is_declared():
    """A package added to the checkout but not to pyproject.toml would be missing from `pip install .`."""
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, subfolders, files in os.walk(ROOT):  # pruned: never into .venv's thousands of folders
        subfolders[:] = [d for d in subfolders if d not in {"tests", ".venv", "build", ".git"}]
        if "__init__.py" in files:
            found.add(".".join(Path(folder).relative_to(ROOT).parts))
    assert found == declared


def _tracked_copy(dst):
    """A copy of the tracked tree (the checkout stays clean of build output)."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for f in files:
        if (ROOT / f).is_file():
            (dst / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst / f)
    return dst


def _backend(src, hook, out):
    """Call a hook of the build backend pyproject.toml names, as a frontend does (offline, no isolation)."""
    system = tomllib.loads((src / "pyproject.toml").read_text())["build-system"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(src / d) for d in system["backend-path"])}
    code = f"import {system['build-backend']} as b; b.{hook}({str(out)!r})"
    return subprocess.run([sys.executable, "-c", code], cwd=src, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("hook", ["build_wheel", "get_requires_for_build_wheel", "prepare_metadata_for_build_wheel"])
def test_a_non_editable_install_is_refused_in_one_line(tmp_path, hook):
    """Installed into site-packages, top-level names like main, train and eval would shadow other projects."""
    src = _tracked_copy(tmp_path / "src")
    (tmp_path / "wheel").mkdir()
    p = _backend(src, hook, tmp_path / "wheel")
    assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1 and "pip install -e ." in p.stderr, p.stderr
    assert not list((tmp_path / "wheel").iterdir()) and not (src / "build").exists()


def test_editable_wheel_declares_packages_and_command_lines(tmp_path):
    src = _tracked_copy(tmp_path / "src")
    out = tmp_path / "wheel"
    out.mkdir()
    p = _backend(src, "build_editable", out)
    assert p.returncode == 0, p.stderr[-2000:]
    (whl,) = out.glob("*.whl")
    z = zipfile.ZipFile(whl)
    names = set(z.namelist())
    dist = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    meta = z.read(f"{dist}/METADATA").decode()
    assert "Requires-Python: >=3.11" in meta and "Requires-Dist: torch==2.13.0" in meta
    finder = z.read(next(n for n in names if n.endswith("_finder.py"))).decode()
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    for name in [p for p in tool["packages"] if "." not in p] + tool["py-modules"]:
        assert f"'{name}': '{src / name}" in finder, name  # read from the checkout, not copied into site-packages
    scripts = z.read(f"{dist}/entry_points.txt").decode()
    for line in ("packaudit-main = main:main", "packaudit-audit = audit.__main__:main", "packaudit-train = train:main",
                 "packaudit-gpu-check = gpu_check.__main__:main"):
        assert line in scripts


def test_each_command_line_shows_its_own_name(monkeypatch, capsys):
    """`packaudit-freeze --help` says `usage: packaudit-freeze`, not `python -m comparison.freeze`."""
    import importlib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name, target in scripts.items():
        module, func = target.split(":")
        monkeypatch.setattr(sys, "argv", [f"/somewhere/bin/{name}", "--help"])
        with pytest.raises(SystemExit) as e:
            getattr(importlib.import_module(module), func)(["--help"])
        assert e.value.code == 0 and capsys.readouterr().out.startswith(f"usage: {name} "), name


def test_run_sh_refuses_a_bad_choice_before_installing(tmp_path):
    for f in ("run.sh", "install/torch_requirement.py", "requirements.lock"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, tmp_path / f)
    p = subprocess.run(["bash", str(tmp_path / "run.sh"), "test"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "PYTHON": sys.executable, "PACKAUDIT_TORCH": "rocm"})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "PACKAUDIT_TORCH" in p.stderr
    assert not (tmp_path / ".venv").exists()


def test_run_sh_setup_installs_and_exits_0_without_running_anything():
    # the suite runs after run.sh installed: setup finds the stamp, installs nothing more, and says it is ready
    p = subprocess.run(["bash", str(ROOT / "run.sh"), "setup"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("ready: .venv has the locks and torch 2.13.0"), p.stderr
