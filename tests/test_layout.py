"""The import convention: every part is a package imported from the repository root. Only the
queue's two scripts put the root on sys.path; the queue package has no import circle."""
import ast
import re

from conftest import ROOT

PKG = ROOT / "shardqueue"


def _imports(path):
    """Every shardqueue module a file imports, lazily or not ("shardqueue.x.y")."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
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
    for p in ROOT.rglob("*.py"):
        rel = p.relative_to(ROOT).parts
        if rel[0] in (".venv", "queue"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [n for n in names if n.split(".")[0] in scripts | {"runpy"}], (p, names)
