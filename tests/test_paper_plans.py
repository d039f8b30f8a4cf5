"""scripts/paper_plans.py: a paper RTL record's plan compared with the plan this tree makes."""

import json

from scriptutil import load_script

ARGS = ["--in-features", "64", "--out-features", "16", "--batch", "4", "--rows", "2",
        "--cols", "2", "--mode", "sparse", "--sim", "verilator"]


def _cache(tmp_path, pp, edit=None):
    """A cache holding one bit-exact record: today's model record of ARGS, edited."""
    result = pp.plan_here(ARGS)
    result["match"] = True
    if edit:
        edit(result)
    rec = dict(sim="verilator", status=0, source="ab" * 32, name="small", args=ARGS,
               result=result)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "k.json").write_text(json.dumps(rec))
    (cache / "model.json").write_text(json.dumps(dict(rec, sim="model")))   # not compared
    return cache


def test_a_record_planned_the_same_passes(tmp_path, capsys):
    pp = load_script("paper_plans")
    assert pp.model_args(ARGS)[-2:] == ["--sim", "model"] and "verilator" not in \
        pp.model_args(ARGS)
    assert pp.main(["--cache", str(_cache(tmp_path, pp))]) == 0
    assert "1 of 1 records plan the same here" in capsys.readouterr().out


def test_a_different_plan_or_system_is_named(tmp_path, capsys):
    pp = load_script("paper_plans")

    def edit(r):
        r["plan"]["kb"] += 1
        r["early_start"] = not r["early_start"]
    assert pp.main(["--cache", str(_cache(tmp_path, pp, edit))]) == 1
    out = capsys.readouterr().out
    assert "plan.kb:" in out and "early_start:" in out and "0 of 1" in out


def test_bad_cache_or_no_record_is_refused(tmp_path, capsys):
    pp = load_script("paper_plans")
    assert pp.main(["--cache", str(tmp_path / "missing")]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert pp.main(["--cache", str(_cache(tmp_path, pp)), "--source", "cd"]) == 2
    assert "no bit-exact Verilator record" in capsys.readouterr().err
