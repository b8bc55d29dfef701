"""Build a student copy of the repository in which the functions the exercises ask for cannot be
read, but everything still runs (the training exercises 5-7, the walkthrough, taco.py itself).

    python exercises/handout.py ../taco-student          # a folder to zip or push for the class
    python exercises/handout.py ../taco-student --force  # replace an earlier hand-out there

What the copy holds, and what it does not:
- exercises/: the pages, the stubs, the checks (`pytest exercises/ --student`), the miniature,
  the walkthrough, requirements.txt and the smoke test. Not: solutions/, correct/, wrong/,
  answers/, TEACHERS.md, measure.py, this script, and the tests of the checks themselves.
- taco.py and data.py stay readable, except the bodies of the functions in HIDDEN (the answers of
  exercises 1-4 and their helpers): each becomes one line that calls the original, kept in
  `_hidden.py`, compressed and base85-encoded, so that nobody reads it by accident. (Encoded
  source rather than bytecode: a .pyc loads only in the Python version that wrote it, and a class
  brings several.) A student who decodes it on purpose skips the exercise; say so in class.
- The repository's own tests (test_*.py at the root) are left out: they compare the reference
  with loops written from the paper, i.e. they hold the answers too.
"""
import argparse
import ast
import base64
import os
import shutil
import subprocess
import sys
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from engine import cli  # noqa: E402
cli.start(__name__)  # first: Ctrl-C / SIGTERM / SIGHUP are one line from now on

# module -> functions whose bodies the copy hides: (name, required). A required name must be
# there; the others are helpers hidden where they exist (code may move between modules).
HIDDEN = {
    "taco.py": [("tc_loss", True), ("sample_positives", True), ("sample_negatives", True), ("other_token", False),
                ("pair_sums", True), ("contextual_score", True)],
    "data.py": [("mask_tokens", True), ("mask_selected", False)],
}
LEFT_OUT = ("exercises/solutions/", "exercises/correct/", "exercises/wrong/", "exercises/answers/",
            "exercises/TEACHERS.md", "exercises/handout.py", "exercises/measure.py",
            "exercises/test_wrong_solutions.py", "exercises/test_measure.py", "exercises/test_handout.py", ".ci/")
NEVER = {".git", "runs", "__pycache__", ".pytest_cache", "out", ".cache", ".venv"}

HIDDEN_MODULE = '''"""The reference implementations of the functions the exercises ask you to write, compressed and
encoded so that they are not read by accident (exercises/handout.py wrote this file). taco.py and
data.py call them, so that the exercises that train (5, 6, 7), the walkthrough and taco.py still
run. Decoding them means skipping the exercise: write your own, the checks tell you when it is right."""
import base64
import sys
import types
import zlib

_ENCODED = {encoded}


def module(name):
    """The original module `name` (taco, data), run once as _hidden_<name>."""
    key = "_hidden_" + name
    if key not in sys.modules:
        source = zlib.decompress(base64.b85decode(_ENCODED[name])).decode("utf-8")
        mod = types.ModuleType(key)
        mod.__file__ = __file__
        sys.modules[key] = mod
        exec(compile(source, "<hidden " + name + ".py>", "exec"), mod.__dict__)
    return sys.modules[key]
'''


def tracked_files(root):
    """The repository's files (tracked, or new and not ignored) where there is a git checkout, else a walk
    without build outputs."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout
        files = [f for f in out.decode().split("\0") if f]
        if files:
            return [f for f in files if os.path.isfile(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in NEVER and not d.endswith(".egg-info")]
        found += [os.path.relpath(os.path.join(folder, n), root) for n in names if not n.endswith(".pyc")]
    return found


def left_out(path):
    path = path.replace(os.sep, "/")
    top = "/" not in path
    return path.startswith(LEFT_OUT) or (top and path.startswith("test_") and path.endswith(".py"))


def hide_bodies(source, module, names):
    """`source` with the body of each function in `names` replaced by a call of the hidden original
    (signature and docstring kept). -> (new source, names hidden)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found = {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}
    missing = [name for name, required in names if required and name not in found]
    if missing:
        raise SystemExit(f"error: {module}.py has no top-level function {', '.join(missing)}: update HIDDEN in "
                         f"exercises/handout.py")
    hidden = [name for name, _ in names if name in found]
    for name in sorted(hidden, key=lambda n: -found[n].lineno):  # from the bottom: line numbers stay valid
        node = found[name]
        args = node.args
        if args.vararg or args.kwarg or args.posonlyargs:
            raise SystemExit(f"error: {module}.{name} takes *args/**kwargs: hide_bodies cannot forward them")
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        start = (first.end_lineno if has_doc else node.body[0].lineno - 1)  # keep the docstring's lines
        indent = " " * (node.body[0].col_offset)
        call = (f"{indent}# An exercise asks you to write this function: in this copy its body is hidden (_hidden.py).\n"
                f"{indent}return __import__(\"_hidden\").module(\"{module}\").{name}(**locals())\n")
        lines[start:node.end_lineno] = [call]
    return "".join(lines), hidden


def build(out, root=ROOT, force=False):
    if os.path.exists(out):
        if not force:
            raise SystemExit(f"error: {out} exists; pass --force to replace it")
        shutil.rmtree(out)
    files = [f for f in tracked_files(root) if not left_out(f)]
    encoded, report = {}, []
    for rel in files:
        dest = os.path.join(out, rel)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if rel in HIDDEN:
            module = rel[:-3]
            with open(os.path.join(root, rel), encoding="utf-8") as f:
                source = f.read()
            new, hidden = hide_bodies(source, module, HIDDEN[rel])
            with open(dest, "w", encoding="utf-8") as f:
                f.write(new)
            encoded[module] = base64.b85encode(zlib.compress(source.encode("utf-8"), 9)).decode("ascii")
            report.append(f"{rel}: hidden {', '.join(hidden)}")
        else:
            shutil.copy2(os.path.join(root, rel), dest)
    with open(os.path.join(out, "_hidden.py"), "w", encoding="utf-8") as f:
        f.write(HIDDEN_MODULE.replace("{encoded}", "{\n" + "".join(
            f"    {name!r}: (\n" + "".join(f"        {chunk!r}\n" for chunk in
                                          (blob[i:i + 96] for i in range(0, len(blob), 96))) + "    ),\n"
            for name, blob in encoded.items()) + "}"))
    with open(os.path.join(out, "HANDOUT.md"), "w", encoding="utf-8") as f:
        f.write("# A student copy of taco\n\nBuilt by `exercises/handout.py`. Start with "
                "[exercises/README.md](exercises/README.md): set up with `pip install -r exercises/requirements.txt`, "
                "check with `python exercises/smoke.py`, then `python -m pytest exercises/ --student`.\n\n"
                "In this copy the functions the exercises ask for (" + "; ".join(report) + ") call hidden "
                "originals (`_hidden.py`) so that everything still runs; write your own in the exercises' stubs.\n")
    return files, report


def main(argv=None):
    p = argparse.ArgumentParser(description="Build a student copy of taco: the exercises' answers hidden, the rest runs.")
    p.add_argument("out", help="the folder to create")
    p.add_argument("--force", action="store_true", help="replace the folder if it exists")
    args = p.parse_args(argv)
    if os.path.abspath(args.out).startswith(os.path.abspath(ROOT) + os.sep):
        raise SystemExit(f"error: {args.out} is inside the repository; build the hand-out outside it")
    files, report = build(args.out, force=args.force)
    print(f"wrote {args.out}: {len(files)} files; " + "; ".join(report))
    print(f"check it: cd {args.out} && python exercises/smoke.py && python -m pytest exercises/ --student")


if __name__ == "__main__":
    main()
