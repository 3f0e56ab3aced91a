"""The layout: every import runs downhill through the levels below (and inside the queue package through its
own levels), no module imports itself in a circle, no function anywhere is longer than 80 lines and no class
longer than 250. Also the import conventions: every part is a package imported from the repository root,
only the queue's two scripts put the root on sys.path, and the queue package has no import circle.

Imports are read with ast, those inside functions included (a late import is still an arrow). An import
inside a function (a late import) says why it is late: a comment on the line above it (or above the run of
imports it stands in, blank lines allowed), or once for the whole file a top-level comment that starts with
`# Late imports:`."""
import ast
import functools
import os
import re
from pathlib import Path

import pytest

from conftest import ROOT

# The levels, lowest first. A part (a top-level package, module or script folder) may import only parts
# on lower levels; siblings on one level never import each other. README's "Layout" section draws it.
LEVELS = (
    ("checkers", "console", "errors"),  # checkers/ imports nothing of the project, at any level; errors/ the error type
    ("corpus",),
    ("presets", "loaders", "manifests", "prepare", "fanout", "records"),
    ("training", "findings"),
    ("protocols", "audit"),
    ("eval",),
    ("shardqueue", "train"),
    ("comparison", "gpu_check"),
    ("main", "queue", "install", "scripts"),  # the command lines that drive everything below
)
LEVEL = {part: i for i, parts in enumerate(LEVELS) for part in parts}
# The queue package's own levels, lowest first, in the same way: a folder or module of shardqueue/ imports
# only its own part and parts below it. README's "Layout" section and shardqueue/__init__.py draw it.
QUEUE_LEVELS = (
    ("settings", "world", "policy"),  # typed settings; the corpus and pool as the queue sees them; what decides
    ("engine",),  # the mechanism under every policy
    ("calibration",),  # stage A, and a calibration folder read back
    ("checks",),  # reconstruct, re-execution, the run's report
    ("runs", "out_folder"),  # a run in its folder from start to summary; what each command writes into its --out
    ("api",),  # the facade
    ("study",),  # the A/B/C experiment on top of it all
)
FUNCTION_LINES = 80
# a class that grows past this is doing several jobs: the queue runner was 471 lines before its policy, its
# world and its final decay moved out (issue 54)
CLASS_LINES = 250
# (file, function): known long functions, each with the issue that removes it
LONG_FUNCTION_EXCEPTIONS = {}
SKIP = {".venv", "tests", "build", "docs", "mutants", ".git"}
LATE_MARK = "# Late imports:"  # a top-level comment that gives the reason for every late import of its file


def python_files(root, skip=SKIP):
    """Every .py file under root, never descending into a skipped folder (.venv alone holds thousands)."""
    out = []
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = [d for d in subfolders if d not in skip]
        out += [Path(folder) / f for f in files if f.endswith(".py")]
    return sorted(out)


def source_files(root):
    return python_files(root)


def importable(root):
    """The names an import can reach: packages (with __init__.py) and top-level modules."""
    root = Path(root)
    return {p.parent.name for p in root.glob("*/__init__.py")} | {p.stem for p in root.glob("*.py")}


def part_of(path, root):
    rel = Path(path).relative_to(root)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def parsed(path):
    """A file's syntax tree; each text is parsed once per test process (the checks below all read every file)."""
    return _parse(Path(path).read_text())


@functools.lru_cache(maxsize=None)
def _parse(text):
    return ast.parse(text)


def walked(path):
    """Every node of a file's syntax tree (ast.walk's order), listed once per test process: ast.walk is a Python
    generator, and the checks below walk every file several times (about 2 s a run, before this list)."""
    return _walk(Path(path).read_text())


@functools.lru_cache(maxsize=None)
def _walk(text):
    return tuple(ast.walk(_parse(text)))


def imported_names(path):
    """(line, dotted name) of every absolute import in a file, at any depth; `from a import b` gives a.b."""
    out = []
    for node in walked(path):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return out


def uphill_imports(root, levels):
    """Imports from a part to one on the same or a higher level (or to a part on no level):
    ["file:line imports name (level a -> level b)", ...]."""
    root = Path(root)
    level = {part: i for i, parts in enumerate(levels) for part in parts}
    names, bad = importable(root), []
    for f in source_files(root):
        src = part_of(f, root)
        for line, name in imported_names(f):
            dst = name.split(".")[0]
            if dst not in names or dst == src:
                continue
            if src not in level or dst not in level or level[dst] >= level[src]:
                bad.append(f"{f.relative_to(root)}:{line} imports {name} "
                           f"(level {level.get(src, '?')} -> level {level.get(dst, '?')})")
    return bad


def inner_uphill_imports(root, package, levels):
    """uphill_imports inside one package: its folders and modules as parts on its own levels; an import of
    the package itself (its __init__) is none of them."""
    pkg_root = Path(root) / package
    level = {part: i for i, parts in enumerate(levels) for part in parts}
    bad = []
    for f in source_files(pkg_root):
        rel = f.relative_to(pkg_root)
        src = rel.parts[0] if len(rel.parts) > 1 else rel.stem
        for line, name in imported_names(f):
            parts = name.split(".")
            if parts[0] != package or len(parts) < 2 or src == "__init__":
                continue
            dst = parts[1]
            if dst == src or not (pkg_root / dst).is_dir() and not (pkg_root / f"{dst}.py").exists():
                continue
            if src not in level or dst not in level or level[dst] >= level[src]:
                bad.append(f"{package}/{rel}:{line} imports {name} (level {level.get(src, '?')} -> "
                           f"level {level.get(dst, '?')})")
    return bad


def module_name(path, root):
    rel = Path(path).relative_to(root).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def module_graph(root):
    """module -> the project modules it imports (importing a.b.c runs a's and a.b's __init__ too)."""
    root = Path(root)
    files = {module_name(f, root): f for f in source_files(root)}
    graph = {}
    for mod, f in files.items():
        deps = set()
        for _, name in imported_names(f):
            parts = name.split(".")
            deps |= {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in files}
        package = mod.rpartition(".")[0] if f.name != "__init__.py" else mod
        deps -= {mod} | {package[:i] for i in range(len(package) + 1) if package[:i] and (
            i == len(package) or package[i] == ".")}  # a module imports its own packages by being inside them
        graph[mod] = deps
    return graph


def long_functions(path, limit=FUNCTION_LINES, kinds=(ast.FunctionDef, ast.AsyncFunctionDef)):
    """(name, lines) of every function (methods and nested ones included; with kinds=(ast.ClassDef,) every
    class) longer than limit lines."""
    out = []
    for node in walked(path):
        if isinstance(node, kinds):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append((node.name, n))
    return out


def late_imports_without_a_reason(path):
    """Line numbers of the imports inside functions that no comment explains: none on the line above the
    import or above its run of imports, and no top-level `# Late imports:` comment in the file."""
    lines = Path(path).read_text().splitlines()
    if any(ln.startswith(LATE_MARK) for ln in lines):
        return []
    tree = parsed(path)
    import_lines = {i for n in walked(path) if isinstance(n, (ast.Import, ast.ImportFrom))
                    for i in range(n.lineno, n.end_lineno + 1)}
    late, below = [], [(child, False) for child in ast.iter_child_nodes(tree)]  # (node, inside a function)
    while below:
        node, inside = below.pop()
        if inside and isinstance(node, (ast.Import, ast.ImportFrom)):
            late.append(node)
        inside = inside or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        below += [(child, inside) for child in ast.iter_child_nodes(node)]
    bad = []
    for n in sorted(late, key=lambda n: n.lineno):
        above = n.lineno - 1  # 1-based: the nearest line above that is neither blank nor an import
        while above >= 1 and (above in import_lines or not lines[above - 1].strip()):
            above -= 1
        if above < 1 or not lines[above - 1].lstrip().startswith("#"):
            bad.append(n.lineno)
    return bad


PKG = ROOT / "shardqueue"


def test_every_part_stands_on_a_level():
    parts = {part_of(f, ROOT) for f in source_files(ROOT)}
    assert parts - set(LEVEL) == set(), "place the new part in LEVELS (and README's layout section)"
    assert len(LEVEL) == sum(len(p) for p in LEVELS)  # no part on two levels


def test_every_import_runs_downhill():
    bad = uphill_imports(ROOT, LEVELS)
    assert not bad, "\n".join(bad)


def test_no_module_imports_itself_in_a_circle():
    assert find_cycle(module_graph(ROOT)) is None, find_cycle(module_graph(ROOT))


def test_the_queue_package_runs_downhill_through_its_own_levels():
    parts = {p.stem if p.suffix == ".py" else p.name for p in PKG.iterdir()
             if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"}
    assert parts == {p for level in QUEUE_LEVELS for p in level}, "place the new part in QUEUE_LEVELS"
    bad = inner_uphill_imports(ROOT, "shardqueue", QUEUE_LEVELS)
    assert not bad, "\n".join(bad)


def test_no_function_is_longer_than_80_lines():
    long = [(str(f.relative_to(ROOT)), name, n) for f in source_files(ROOT) for name, n in long_functions(f)
            if (str(f.relative_to(ROOT)), name) not in LONG_FUNCTION_EXCEPTIONS]
    assert not long, long


def test_no_class_is_longer_than_250_lines():
    long = [(str(f.relative_to(ROOT)), name, n) for f in source_files(ROOT)
            for name, n in long_functions(f, CLASS_LINES, (ast.ClassDef,))]
    assert not long, long


def test_the_checks_see_an_uphill_import_a_circle_and_a_long_function(tmp_path):
    """Each check above fails where it should: a small house with one of each fault."""
    (tmp_path / "low").mkdir()
    (tmp_path / "high").mkdir()
    (tmp_path / "low" / "__init__.py").write_text("")
    (tmp_path / "high" / "__init__.py").write_text("")
    (tmp_path / "high" / "a.py").write_text("import low.b\n")
    (tmp_path / "low" / "b.py").write_text("def f():\n    from high import a  # late, still an arrow\n")
    bad = uphill_imports(tmp_path, (("low",), ("high",)))
    assert bad == ["low/b.py:2 imports high.a (level 0 -> level 1)"]
    assert uphill_imports(tmp_path, (("low", "high"),))  # siblings on one level import each other: refused too
    assert find_cycle(module_graph(tmp_path)) in (["high.a", "low.b", "high.a"], ["low.b", "high.a", "low.b"])
    (tmp_path / "low" / "b.py").write_text("def f():\n" + "    x = 1\n" * 80)
    assert uphill_imports(tmp_path, (("low",), ("high",))) == [] and find_cycle(module_graph(tmp_path)) is None
    assert long_functions(tmp_path / "low" / "b.py") == [("f", 81)]
    assert long_functions(tmp_path / "low" / "b.py", limit=81) == []
    (tmp_path / "low" / "c.py").write_text("class C:\n" + "    x = 1\n" * 250)
    assert long_functions(tmp_path / "low" / "c.py", CLASS_LINES, (ast.ClassDef,)) == [("C", 251)]
    # inside a package: a lower part importing a higher one, and a part on no level
    (tmp_path / "high" / "base").mkdir()
    (tmp_path / "high" / "base" / "__init__.py").write_text("")
    (tmp_path / "high" / "base" / "x.py").write_text("from high import top\nimport high.base.y\n")
    (tmp_path / "high" / "top.py").write_text("from high.base import x\nfrom high import loose\n")
    (tmp_path / "high" / "loose.py").write_text("")
    assert inner_uphill_imports(tmp_path, "high", (("base",), ("top",))) == [
        "high/base/x.py:1 imports high.top (level 0 -> level 1)", "high/top.py:2 imports high.loose (level 1 -> level ?)"]


def test_every_late_import_says_why():
    bad = [f"{f.relative_to(ROOT)}:{line}" for f in source_files(ROOT) for line in late_imports_without_a_reason(f)]
    assert not bad, ("an import inside a function needs a comment saying why it is not at the top of the file "
                     "(on the line above it, or a top-level `# Late imports:` comment):\n" + "\n".join(bad))


def test_the_late_import_check_sees_an_import_with_no_reason(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("import os\n\n\ndef f():\n    x = os.sep\n    import json\n    return json, x\n")
    assert late_imports_without_a_reason(f) == [6]
    f.write_text("def f():\n    # late: the reason\n    import json\n\n    from csv import reader\n    return json, reader\n")
    assert late_imports_without_a_reason(f) == []  # one comment covers its run of imports
    f.write_text("def f():\n    # a comment about x\n    x = 1\n    import json\n    return json, x\n")
    assert late_imports_without_a_reason(f) == [4]  # a comment above other code says nothing of the import
    f.write_text(f"{LATE_MARK} the reason, once for the file\n\n\ndef f():\n    import json\n    return json\n")
    assert late_imports_without_a_reason(f) == []
    f.write_text("import json  # at the top: no reason needed\n")
    assert late_imports_without_a_reason(f) == []


def _imports(path):
    """Every shardqueue module a file imports, lazily or not ("shardqueue.x.y")."""
    out = set()
    for node in walked(path):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("shardqueue")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("shardqueue"):
            for a in node.names:  # `from shardqueue import api` names a module, not an attribute
                sub = f"{node.module}.{a.name}"
                is_mod = (ROOT / (sub.replace(".", "/") + ".py")).exists() or (ROOT / sub.replace(".", "/")).is_dir()
                out.add(sub if is_mod else node.module)
    return out


def _module(path):
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def find_cycle(graph):
    """A list of modules forming a circle, or None (depth-first search, colours)."""
    colour, stack = {}, []

    def visit(m):
        colour[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if colour.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in colour:
                c = visit(n)
                if c:
                    return c
        stack.pop()
        colour[m] = 2
        return None

    for m in sorted(graph):
        if m not in colour:
            c = visit(m)
            if c:
                return c
    return None


def test_find_cycle_sees_a_circle_and_a_clean_graph():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_queue_package_has_no_import_circle():
    files = sorted(PKG.rglob("*.py"))
    graph = {_module(f): {m for m in _imports(f) if m != _module(f)} for f in files}
    # an import of a package runs its __init__: an edge to the package itself
    assert find_cycle(graph) is None, find_cycle(graph)
    assert "shardqueue.api" in graph and "shardqueue.study.run" in graph


def test_no_module_is_named_after_its_folder():
    assert not [p.name for p in PKG.rglob("queue_*.py")]
    assert not [p.name for p in PKG.rglob("study_*.py")]


def test_only_the_two_queue_scripts_edit_sys_path():
    editors = sorted(str(p.relative_to(ROOT)) for d in ("shardqueue", "tests", "queue")
                     for p in (ROOT / d).rglob("*.py")
                     if p.name != "test_layout.py" and re.search(r"sys\.path\.(insert|append|extend)|sys\.path\s*(\[|=|\+)", p.read_text()))
    assert editors == ["queue/run_queue.py", "queue/study.py"], editors
    for script in ("run_queue.py", "study.py"):
        assert (ROOT / "queue" / script).read_text().count("sys.path.insert") == 1


def test_no_module_imports_from_the_queue_folder_and_main_uses_no_runpy():
    assert not (ROOT / "queue" / "__init__.py").exists()
    scripts = {"run_queue", "study"}
    for p in python_files(ROOT, {".venv", "queue", ".git", "mutants"}):
        for node in walked(p):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.split(".")[0] in scripts | {"runpy"}], (p, names)


def test_every_package_map_names_each_of_its_modules():
    # a package's docstring is its module map (a newcomer reads it first): a module it does not name is
    # one nobody will find, so adding a file means adding its line
    missing = []
    for init in (p for p in source_files(ROOT) if p.name == "__init__.py"):
        doc = ast.get_docstring(parsed(init)) or ""
        missing += [str(p.relative_to(ROOT)) for p in sorted(init.parent.glob("*.py"))
                    if p.name != "__init__.py" and not re.search(rf"(?<![\w/]){re.escape(p.name)}", doc)]
    assert not missing, f"not in their package's map: {missing}"


def imports_at_start(path):
    """The dotted names a file imports when it is imported: module-level imports (in `if`, `try` and class bodies
    too), not those inside functions nor under `if TYPE_CHECKING:`; `from a import b` gives a and a.b."""
    out, below = [], list(ast.iter_child_nodes(parsed(path)))
    while below:
        node = below.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) or (
                isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        below += list(ast.iter_child_nodes(node))
    return out


def loaded_with(root, module):
    """Every name importing `module` loads: the project's modules it reaches through imports_at_start (each with its
    packages' __init__), and the first part of every other name (the libraries)."""
    root = Path(root)
    files = {module_name(f, root): f for f in source_files(root)}
    ours = {m.split(".")[0] for m in files}
    seen, todo = set(), [module]
    while todo:
        parts = todo.pop().split(".")
        if parts[0] not in ours:
            seen.add(parts[0])
            continue
        for name in (".".join(parts[:i]) for i in range(1, len(parts) + 1)):
            if name in files and name not in seen:
                seen.add(name)
                todo += imports_at_start(files[name])
    return seen


def test_an_audit_without_figures_loads_no_matplotlib():
    """`python -m audit --no-figures` (and every command line that only reports, and a --no-figures frontier) pays
    nothing for matplotlib's 0.4 s: audit.run draws through audit.plots, audit.sweep through audit.frontier_figure,
    each imported where the figures are drawn."""
    assert "matplotlib" in loaded_with(ROOT, "audit.plots")  # the check sees it where it is
    for cli in ("audit.__main__", "audit.run", "audit.report", "audit.sweep"):
        assert "matplotlib" not in loaded_with(ROOT, cli), cli


def test_the_queue_commands_api_loads_no_matplotlib():
    """`queue/run_queue.py reconstruct` (the API, the replay, the re-execution) loads no figure library: a queue
    run's report imports its figure module where it draws."""
    assert "matplotlib" in loaded_with(ROOT, "shardqueue.checks.control_figure")
    for module in ("shardqueue.api", "shardqueue.checks.replay", "shardqueue.checks.reexecute"):
        assert "matplotlib" not in loaded_with(ROOT, module), module
