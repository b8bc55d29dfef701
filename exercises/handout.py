"""Build a student copy of the repository in which the answers of the exercises cannot be read,
but everything still runs (the training exercises 5-7, the walkthrough, taco.py itself).

    python exercises/handout.py ../taco-student                  # a folder to zip or push for the class
    python exercises/handout.py ../taco-student --force          # replace what is there (an earlier hand-out)
    python exercises/handout.py ../taco-results --with_results   # after the predictions: exercises 5-7's results

The copy is built from the COMMITTED files (git archive of HEAD, or of --commit), never from the
working tree: a stub tried out in the lecturer's checkout stays out. It says which commit it was
built from (on stdout and in HANDOUT.md), and refuses a commit whose stubs (STUBS) are not empty.
What the copy holds, and what it does not:
- exercises/: the pages, the stubs, the checks (`pytest exercises/ --student`), the miniature,
  the walkthrough, requirements.txt, the smoke test and collect.py. Not: solutions/, correct/,
  wrong/, answers/ (the answer key and exercises 5-7's measured results: --with_results adds
  the results, for after the predictions), TEACHERS.md, measure.py, this script, and the tests
  of the checks themselves. A paragraph of a Markdown page that names what is left out is left
  out with it, and so is a notebook's saved output that prints a hidden function.
- The bodies of the functions in HIDDEN (the answers of exercises 1-4, 6 and 7 wherever the code
  holds them) become one line that calls the original, kept in `_hidden.py`, compressed and
  base85-encoded, so that nobody reads it by accident; a class in HIDDEN keeps its name and
  docstring and inherits the hidden original. (Encoded source rather than bytecode: a .pyc loads
  only in the Python version that wrote it, and a class brings several.) A student who decodes it
  on purpose skips the exercise; say so in class.
- The repository's own tests (test_*.py at the root, tests/) are left out: they compare the
  reference with loops written from the paper, i.e. they hold the answers too.
"""
import argparse
import ast
import base64
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from engine import cli, folders  # noqa: E402
from engine.cli import UsageError  # noqa: E402

# module -> functions (or classes) whose bodies the copy hides: (name, required). A required name
# must be there; the others are helpers hidden where they exist (code may move between modules).
HIDDEN = {
    "taco.py": [("tc_loss", True), ("sample_positives", True), ("sample_negatives", True), ("other_token", False),
                ("pair_sums", True), ("contextual_score", True),
                ("make_model", True)],  # exercise 7: how --freeze_embeddings freezes
    "data.py": [("mask_tokens", True), ("mask_selected", False)],
    "model.py": [("MLMHead", True)],  # exercise 7: the untied decoder
    "tools/study.py": [("first_match", True)],  # exercise 6: the first step reaching MLM's final value
    "tools/analyze.py": [("distance_score", True), ("self_similarity", True)],  # exercise 3: pairs, closed form
}
LEFT_OUT = ("exercises/solutions/", "exercises/correct/", "exercises/wrong/", "exercises/answers/",
            "exercises/TEACHERS.md", "exercises/handout.py", "exercises/measure.py",
            "exercises/test_wrong_solutions.py", "exercises/test_measure.py", "exercises/test_handout.py",
            "exercises/test_collect.py", "tests/", ".ci/", ".github/")
STUBS = {  # the functions a student writes: in the hand-out each must still be `raise NotImplementedError`
    "exercises/ex1_tc_loss.py": ("tc_loss",), "exercises/ex2_samplers.py": ("sample_positives", "sample_negatives"),
    "exercises/ex3_contextual_score.py": ("score_brute_force", "score_closed_form"),
    "exercises/ex4_masking.py": ("mask_tokens",), "exercises/ex6_mlm_vs_taco.py": ("first_step_reaching", "speedup"),
    "exercises/ex7_embeddings.py": ("freeze_embeddings", "untie_embeddings"),
}
RESULTS = "exercises/answers/results/"  # what --with_results adds: exercises 5-7's tables and conclusions
# A Markdown paragraph naming one of these is about what the copy leaves out: it is left out too.
NAMES_LEFT_OUT = re.compile(r"TEACHERS\.md|solutions/|correct/|wrong/|answers/|ANSWERS\.md|handout\.py|measure\.py"
                            r"|test_wrong_solutions")

HIDDEN_MODULE = '''"""The reference implementations of the functions the exercises ask you to write, compressed and
encoded so that they are not read by accident (exercises/handout.py wrote this file). The modules
call them, so that the exercises that train (5, 6, 7), the walkthrough and taco.py still run.
Decoding them means skipping the exercise: write your own, the checks tell you when it is right."""
import base64
import os
import sys
import types
import zlib

_ENCODED = {encoded}


def module(name):
    """The original module `name` (taco, data, model, tools.study, ...), run once as _hidden_<name>."""
    key = "_hidden_" + name
    if key not in sys.modules:
        source = zlib.decompress(base64.b85decode(_ENCODED[name])).decode("utf-8")
        mod = types.ModuleType(key)
        mod.__file__ = os.path.join(os.path.dirname(os.path.abspath(__file__)), *name.split(".")) + ".py"
        sys.modules[key] = mod
        exec(compile(source, "<hidden " + name + ".py>", "exec"), mod.__dict__)
    return sys.modules[key]
'''


def committed_files(root, commit="HEAD"):
    """-> (full commit id, {path: (bytes, mode)}) of the files committed at `commit`: what
    `git archive` gives, never the working tree."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=root, capture_output=True, check=True).stdout
    try:
        sha = git("rev-parse", "--verify", "--quiet", commit + "^{commit}").decode().strip()
        archive = tarfile.open(fileobj=io.BytesIO(git("archive", "--format=tar", sha)))
    except (OSError, subprocess.CalledProcessError):
        raise UsageError(f"{root} has no commit {commit!r} (or is not a git checkout): the hand-out is built from "
                         f"committed files only, so that nothing tried out in a working copy reaches the students; "
                         f"commit, or pass --commit") from None
    return sha, {m.name: (archive.extractfile(m).read(), m.mode) for m in archive.getmembers() if m.isfile()}


def uncommitted(root):
    """The paths of the working copy that differ from HEAD (changed, new or deleted)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "-z"], cwd=root, capture_output=True,
                             check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return []
    return [entry[3:] for entry in out.split("\0") if len(entry) > 3]


def left_out(path, with_results=False):
    top = "/" not in path
    if with_results and path.startswith(RESULTS):
        return False
    return path.startswith(LEFT_OUT) or (top and path.startswith("test_") and path.endswith(".py"))


def without_teachers_paragraphs(text):
    """A Markdown page without its measure.py markers and without the paragraphs that name what
    the hand-out leaves out (TEACHERS.md, solutions/, ...): a student's copy must not point at them."""
    text = re.sub(r"^<!-- /?measure\.py(:[\w-]+)? -->\n", "", text, flags=re.M)
    parts = re.split(r"(\n{2,})", text)  # paragraph, blank lines, paragraph, ...
    return "".join(p + gap for p, gap in zip(parts[::2], parts[1::2] + [""]) if not NAMES_LEFT_OUT.search(p))


def check_stubs(files, sha):
    """Refuse a commit whose stubs hold an answer (a body other than its docstring and
    `raise NotImplementedError`): committed solutions would reach every student."""
    for rel, names in STUBS.items():
        tree = ast.parse(files[rel][0].decode("utf-8"))
        bodies = {n.name: n.body for n in tree.body if isinstance(n, ast.FunctionDef)}
        for name in names:
            body = [s for s in bodies.get(name, []) if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
            empty = len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.dump(body[0])
            if not empty:
                raise UsageError(f"commit {sha[:12]}'s {rel} has {name} written (its body is not `raise "
                                 f"NotImplementedError`): the hand-out would give the answer away; commit the empty "
                                 f"stub again (git checkout <an earlier commit> -- {rel}), or pass --commit")


def without_hidden_outputs(data):
    """A notebook (JSON) without the saved outputs that print a hidden function's source (e.g.
    `inspect.getsource(taco.tc_loss)`): run in the hand-out, such a cell prints the hidden stub."""
    names = "|".join(name for entries in HIDDEN.values() for name, _ in entries)
    printed = re.compile(rf"^\s*(def|class) ({names})\b", re.M)
    nb = json.loads(data)
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = [o for o in cell.get("outputs", []) if not printed.search(
                "".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", "")))]
    return (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")


def hide_bodies(source, module, names):
    """`source` with the body of each function in `names` replaced by a call of the hidden original
    (signature and docstring kept); a class keeps its name and docstring and inherits the hidden
    original instead. -> (new source, names hidden)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    missing = [name for name, required in names if required and name not in found]
    if missing:
        raise UsageError(f"{module.replace('.', '/')}.py has no top-level function {', '.join(missing)}: update HIDDEN "
                         f"in exercises/handout.py")
    hidden = [name for name, _ in names if name in found]
    original = f'__import__("_hidden").module("{module}").'
    for name in sorted(hidden, key=lambda n: -found[n].lineno):  # from the bottom: line numbers stay valid
        node = found[name]
        first = node.body[0]
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
        start = first.end_lineno if has_doc else first.lineno - 1  # keep the docstring's lines
        indent = " " * first.col_offset
        note = f"{indent}# An exercise asks you to write this: in this copy its body is hidden (_hidden.py).\n"
        if isinstance(node, ast.ClassDef):
            header = lines[node.lineno - 1]
            if not re.match(rf"\s*class {name}\b[^:]*:\s*$", header):
                raise UsageError(f"{module}.{name}: handout.py hides classes whose header is one line")
            lines[start:node.end_lineno] = [note, f"{indent}pass\n"]
            lines[node.lineno - 1] = f"class {name}({original}{name}):\n"
            continue
        args = node.args
        if args.vararg or args.kwarg or args.posonlyargs:
            raise UsageError(f"{module}.{name} takes *args/**kwargs: hide_bodies cannot forward them")
        lines[start:node.end_lineno] = [note, f"{indent}return {original}{name}(**locals())\n"]
    return "".join(lines), hidden


def hidden_module(encoded):
    """The text of _hidden.py: the originals of the modules in HIDDEN, compressed, base85 in lines of 96."""
    blobs = "".join(f"    {name!r}: (\n" + "".join(f"        {blob[i:i + 96]!r}\n" for i in range(0, len(blob), 96))
                    + "    ),\n" for name, blob in encoded.items())
    return HIDDEN_MODULE.replace("{encoded}", "{\n" + blobs + "}")


def write(folder, rel, data, mode=0o644):
    dest = os.path.join(folder, rel)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    with open(dest, "wb") as f:
        f.write(data)
    os.chmod(dest, mode & 0o777)


def fill(folder, files, sha, with_results=False):
    """Write the hand-out of the committed `files` into `folder`. -> (paths written, report)."""
    encoded, report, shipped = {}, [], []
    for rel, (data, mode) in sorted(files.items()):
        if left_out(rel, with_results):
            continue
        if rel in HIDDEN:
            source, module = data.decode("utf-8"), rel[:-3].replace("/", ".")
            new, hidden = hide_bodies(source, module, HIDDEN[rel])
            data = new.encode("utf-8")
            encoded[module] = base64.b85encode(zlib.compress(source.encode("utf-8"), 9)).decode("ascii")
            report.append(f"{rel}: hidden {', '.join(hidden)}")
        elif rel.endswith(".md"):
            data = without_teachers_paragraphs(data.decode("utf-8")).encode("utf-8")
        elif rel.endswith(".ipynb"):
            data = without_hidden_outputs(data)
        write(folder, rel, data, mode)
        shipped.append(rel)
    write(folder, "_hidden.py", hidden_module(encoded).encode("utf-8"))
    write(folder, "HANDOUT.md", (
        f"# A student copy of taco\n\nBuilt from commit {sha} of taco by its hand-out script"
        + (" (with exercises 5-7's results)" if with_results else "") + ". Start with "
        "[exercises/README.md](exercises/README.md): set up with `pip install -r exercises/requirements.txt`, "
        "check with `python exercises/smoke.py`, then `python -m pytest exercises/ --student`.\n\n"
        "In this copy the functions the exercises ask for (" + "; ".join(report) + ") call hidden "
        "originals (`_hidden.py`) so that everything still runs; write your own in the exercises' stubs.\n").encode())
    return shipped + ["_hidden.py", "HANDOUT.md"], report


def build(out, root=ROOT, force=False, commit="HEAD", with_results=False):
    """Build the hand-out of `root`'s committed files at `out`, written whole by engine/folders.py: an
    interrupted build leaves nothing; a non-empty folder there is replaced only with `force`, never the
    repository or a folder above it. -> (sha, files, report, uncommitted)."""
    out = os.path.abspath(out)
    if folders.inside(out, root):
        raise UsageError(f"{out} is inside the repository; build the hand-out outside it")
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise UsageError(f"{out}: its folder {parent} does not exist")
    with folders.replacing(out, "handout.py", force, {"the repository": root}) as tmp:  # checks `out` first
        sha, files = committed_files(root, commit)
        check_stubs(files, sha)
        shipped, report = fill(tmp, files, sha, with_results)
    return sha, shipped, report, uncommitted(root) if commit == "HEAD" else []


def main(argv=None):
    p = argparse.ArgumentParser(description="Build a student copy of taco from its committed files: the exercises' "
                                            "answers hidden, the rest runs.")
    p.add_argument("out", help="the folder to create (outside the repository)")
    p.add_argument("--force", action="store_true", help="replace the non-empty folder there (an earlier hand-out)")
    p.add_argument("--commit", default="HEAD", help="the commit to build from (default: HEAD)")
    p.add_argument("--with_results", action="store_true", help="add exercises 5-7's measured tables and conclusions "
                   "(exercises/answers/results/): hand these out after the predictions")
    args = p.parse_args(argv)
    with cli.errors():
        sha, files, report, changed = build(args.out, force=args.force, commit=args.commit,
                                            with_results=args.with_results)
        print(f"wrote {args.out} from commit {sha[:12]}: {len(files)} files; " + "; ".join(report))
        if changed:
            print(f"note: {len(changed)} path(s) of your working copy differ from that commit and are NOT in the "
                  f"hand-out (it holds the committed versions): {', '.join(changed[:5])}"
                  + (", ..." if len(changed) > 5 else ""))
        print(f"check it: cd {args.out} && python exercises/smoke.py && python -m pytest exercises/ --student")


if __name__ == "__main__":
    main()
