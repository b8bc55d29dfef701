"""exercises/measure.py: its tables, the claims it checks and how it writes the pages, on made-up
results (the runs it makes are the drivers' own, tested in test_ex5/6/7). Not in a student hand-out."""
import pytest


def test_measure_tables_from_results(tmp_path, monkeypatch):
    """exercises/measure.py's tables and claims, on made-up results (its runs are the drivers' own, tested above)."""
    from exercises import measure
    curve = [(50, 0.0), (100, 0.25), (300, 0.25)]
    loss = [(50, 5.0), (100, 4.9), (300, 4.8)]
    ex5 = {s: {name: {"ctx": 0.25 - 0.1 * (name == "K=4"), "wordsim": 0.0, "eval_mlm_loss": 4.9, "cpu_s": 15.0}
               for name in measure.LABEL5} for s in (0, 1)}
    ex6 = {s: {n: {"ctx": c, "eval_mlm_loss": 4.9, "wordsim": 0.0, "ctx_curve": k, "mlm_curve": loss}
               for n, c, k in (("mlm", 0.0, [(50, 0.0), (100, 0.0), (300, 0.0)]), ("taco", 0.25, curve))} for s in (0, 1)}
    ex7 = {s: {n: {"ctx": 0.1, "eval_mlm_loss": 5.5, "wordsim": 0.0, "cpu_s": 15.0} for n in ("mlm", "taco")} for s in (0, 1)}
    r = {"ex5": ex5, "ex6": ex6, "ex7": ex7, "time": {k: {"wall_s": 60.0, "cpu_s": 90.0} for k in ("ex5", "ex6", "ex7")}}
    info = {"commit": "abc1234", "date": "2026-01-01", "jobs": 2, "cores": 2, "load_at_start": "0.1, 0.1, 0.1"}
    t = measure.tables(r, [0, 1], info)
    assert "| K=4 | 0.150 (0.150 – 0.150) |" in t["ex5-table"] and "abc1234" in t["ex5-table"]
    assert "| 100 | 0.000 / 0.000 | 0.250 / 0.250 |" in t["ex6-curves"]
    assert "one run takes 15 – 15 CPU-seconds" in t["ex5-time"]
    page = tmp_path / "page.md"
    page.write_text("a\n<!-- measure.py:preliminary -->\n<!-- /measure.py -->\nkept\n<!-- measure.py:ex5-table -->\n"
                    "old\n<!-- /measure.py -->\n<!-- measure.py:ex5-seeds -->\n<!-- /measure.py -->\nb\n")
    monkeypatch.setattr(measure, "PAGES", {"page.md": str(page)})
    assert measure.update_pages(t) == ["page.md"]
    text = page.read_text()
    assert "| K=4 | 0.150" in text and "old" not in text and "kept" in text and "Per seed (0 / 1)" in text
    assert "PRELIMINARY" in text  # 2 seeds: not the final tables
    assert text.count("<!-- /measure.py -->") == 3 and measure.update_pages(t) == []  # the same again: no change


@pytest.mark.parametrize("case", ["not measure's", "missing", "a folder as --json", "a file as --out"])
def test_measure_mistakes_are_one_line(tmp_path, capsys, case):
    """A JSON that is not measure.py's, a missing one, a folder as --json, a file as --out: one line, exit 2,
    before any run."""
    from exercises import measure
    (tmp_path / "other.json").write_text('{"results": {"ex5": {"0": 3}}}')
    (tmp_path / "a_file").write_text("x")
    args = {"not measure's": ["--tables_from", str(tmp_path / "other.json")],
            "missing": ["--tables_from", str(tmp_path / "missing.json")],
            "a folder as --json": ["--json", str(tmp_path)],
            "a file as --out": ["--out", str(tmp_path / "a_file")]}[case]
    with pytest.raises(SystemExit) as stop:
        measure.main(args + ([] if case == "a file as --out" else ["--out", str(tmp_path / "m")]))
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    if case == "not measure's":
        assert "is not a file that `measure.py --json` wrote" in err
