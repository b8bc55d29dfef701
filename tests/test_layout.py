"""The layout: the card's scripts at the root, the rest in folders; imports run one way (the
engineering at the bottom, the root scripts on it, the tools and exercises on top)."""
import ast
import glob
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARD = ("taco.py", "model.py", "data.py", "finetune.py")
FOLDERS = ("engine", "tools", "tests", "exercises")


def tracked():
    return subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()


def module_of(path):
    """engine/cli.py -> engine.cli; taco.py -> taco."""
    return os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")


def imports(path):
    """The project modules a file imports (engine.cli, taco, tools.analyze, ...)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                 [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 else [])
        found |= {n for n in names if os.path.isfile(os.path.join(ROOT, n.replace(".", os.sep) + ".py"))}
    return found


def product_files():
    return sorted(glob.glob(os.path.join(ROOT, "*.py")) + glob.glob(os.path.join(ROOT, "engine", "*.py"))
                  + glob.glob(os.path.join(ROOT, "tools", "*.py")))


def test_the_root_shows_the_card():
    """At most 16 entries at the root, and no Python file there but the card's four and its test."""
    names = tracked()
    if not names:  # not a git checkout (an unpacked archive): what is on disk
        names = os.listdir(ROOT)
    top = {n.split("/")[0] for n in names}
    assert len(top) <= 16, sorted(top)
    assert {n for n in top if n.endswith(".py")} <= set(CARD) | {"test_taco.py"}, sorted(top)
    assert set(CARD) | {"README.md", "requirements.txt", "test_taco.py"} | set(FOLDERS) <= top


def test_imports_run_one_way():
    """engine/ imports none of the scripts above it (model.py alone, the architecture that weights are
    loaded into), the root scripts no tool, and there is no cycle."""
    graph = {module_of(p): imports(p) for p in product_files()}
    for name, deps in graph.items():
        if name.startswith("engine."):
            assert all(d.startswith("engine") or d == "model" for d in deps), (name, deps)
        elif "." not in name:  # a root script
            assert not any(d.startswith("tools") for d in deps), (name, deps)
    state = {}

    def visit(node, path):
        assert state.get(node) != "open", f"import cycle: {' -> '.join(path + [node])}"
        if state.get(node) is None:
            state[node] = "open"
            for nxt in graph.get(node, ()):
                visit(nxt, path + [node])
            state[node] = "done"
    for node in graph:
        visit(node, [])


def test_sizes_keep_each_file_readable():
    """The four scripts together at most 2,000 lines; no product file over 700."""
    lines = {os.path.relpath(p, ROOT): sum(1 for _ in open(p)) for p in product_files()}
    assert sum(lines[s] for s in CARD) <= 2000, {s: lines[s] for s in CARD}
    assert max(lines.values()) <= 700, max(lines.items(), key=lambda kv: kv[1])


def test_scripts_take_only_the_method_from_taco():
    """What other files use of taco.py is defined there (the method), never something taco.py
    itself imports (the run's engineering lives in engine/)."""
    own = {"__doc__"} | {n.name if not isinstance(n, ast.Assign) else n.targets[0].id
                         for n in ast.parse(open(os.path.join(ROOT, "taco.py")).read()).body
                         if isinstance(n, (ast.FunctionDef, ast.ClassDef))
                         or isinstance(n, ast.Assign) and hasattr(n.targets[0], "id")}
    files = [f for f in product_files() + glob.glob(os.path.join(ROOT, "exercises", "**", "*.py"), recursive=True)
             if not f.endswith("taco.py")]
    for path in files:
        for node in ast.walk(ast.parse(open(path).read())):
            used = (node.names if isinstance(node, ast.ImportFrom) and node.module == "taco" else
                    [node] if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "taco"
                    else [])
            for item in used:
                name = getattr(item, "name", None) or item.attr
                assert name in own, f"{os.path.relpath(path, ROOT)} takes {name} from taco.py"
