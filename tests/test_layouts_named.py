"""Issue 15, item 2: a policy runs the layout it names or stops with the reason; every label and
summary names the whole deployment (`dp=4 x tp=1`); a policy's by-design substitutions (Shift's base,
SiDP's default layout) are one `note:` line on stderr and in summary.json's `notes`."""
import json

from perfmodel.cli import main as perfmodel_main
from simulator.apps.cli import main

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--gpus", "4", "--profile", "none", "--weights", "fp8",
         "--trace", "synthetic:poisson?n=20&rate=2&input=256&output=16"]


def _json(capsys, *argv):
    """(summary or list of summaries, stderr) of a run that succeeds."""
    rc = main([*SMALL, "--format", "json", *argv])
    cap = capsys.readouterr()
    assert rc == 0, cap.err
    return json.loads(cap.out), cap.err


def _refused(capsys, *argv, cli=main) -> str:
    """Exit code 2, nothing on stdout, one `error:` line on stderr."""
    rc = cli(list(argv))
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "", (rc, cap.out, cap.err)
    assert cap.err.startswith("error: ") and cap.err.count("\n") == 1, cap.err
    return cap.err


def test_layout_with_compare_is_refused_unless_given_per_policy(capsys):
    err = _refused(capsys, *SMALL, "--layout", "tp=2", "--compare", "tp,dp,layout")
    assert "--compare tp,dp,layout:tp=2" in err  # says how to write it
    runs, _ = _json(capsys, "--compare", "tp,dp,layout:tp=2,pp=2,layout:tp=2")
    assert [s["policy"] for s in runs] == ["tp", "dp", "layout", "layout"]
    assert [s["layout"] for s in runs] == ["tp=4", "dp=4 x tp=1", "tp=2,pp=2", "dp=2 x tp=2"]
    rc = main([*SMALL, "--compare", "tp,layout:tp=2,pp=2"])  # the table's columns name the layout
    assert rc == 0 and capsys.readouterr().out.splitlines()[1].split() == ["metric", "tp", "layout:tp=2,pp=2"]
    assert "'layout' needs its layout" in _refused(capsys, *SMALL, "--compare", "tp,layout")
    assert "'pp=2' is not a policy" in _refused(capsys, *SMALL, "--compare", "tp,pp=2")


def test_layout_with_a_policy_that_chooses_its_own_is_refused(capsys):
    for policy in ("tp", "dp", "flying", "seesaw"):
        err = _refused(capsys, *SMALL, "--policy", policy, "--layout", "tp=2")
        assert f"--policy {policy} chooses its own layout" in err and "--policy layout --layout tp=2" in err
    assert _json(capsys, "--policy", "layout", "--layout", "tp=2")[0]["layout"] == "dp=2 x tp=2"
    # by design: Shift reads --layout as its base, SiDP its tp (and says so)
    assert _json(capsys, "--policy", "shift", "--layout", "sp=2,tp=2")[0]["layout"] == "base: tp=2,sp=2 / shift: tp=4"
    summ, err = _json(capsys, "--policy", "sidp", "--layout", "tp=2")
    assert summ["layout"] == "dp=2 x tp=2 (was / cas)" and "note: sidp: --layout tp=2 read for its tp only" in err


def test_dp_with_one_replica_and_ep_without_experts_are_refused(capsys):
    big = ["--model", "llama-3.1-405b", "--weights", "bf16", "--profile", "none",
           "--trace", "synthetic:poisson?n=5&rate=2&input=256&output=16"]
    err = _refused(capsys, *big, "--policy", "dp")
    assert err.strip() == ("error: dp: llama-3.1-405b needs tp=8 per replica on h200_sxm, so 8 GPUs hold one "
                           "replica: no data parallelism; use tp or more GPUs")
    assert "ep: llama-3.1-8b has no experts" in _refused(capsys, *SMALL, "--policy", "ep")


def test_estimate_refuses_dp_that_would_equal_tp(capsys):
    """`perfmodel estimate` prints a "does not fit" row for dp (as for a strategy that does not fit: issue 33
    finding 14) rather than a dp row identical to tp's, and the rows that fit; only when nothing fits it stops."""
    assert perfmodel_main(["estimate", "--model", "llama-3.1-405b", "--weights", "bf16", "--profile", "none",
                           "--strategies", "dp,tp"]) == 0
    rows = [ln.split()[0:3] for ln in capsys.readouterr().out.splitlines() if ln.startswith(("dp ", "tp "))]
    assert rows == [["dp", "does", "not"], ["tp", "tp=8", rows[1][2]]]
    err = _refused(capsys, "estimate", "--strategies", "ep", "--profile", "none", cli=perfmodel_main)
    assert "ep: llama-3.3-70b has no experts" in err


def test_summaries_and_estimate_name_the_whole_deployment(capsys):
    runs, _ = _json(capsys, "--compare", "dp,tp,shift")
    assert [s["layout"] for s in runs] == ["dp=4 x tp=1", "tp=4", "base: sp=4 / shift: tp=4"]
    assert perfmodel_main(["estimate", "--format", "json", "--strategies", "dp,tp,shift", "--profile", "none"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["layout"] for r in rows] == ["dp=8 x tp=1", "tp=8", "base: sp=8 / shift: tp=8"]


def test_substitutions_by_design_are_noted_on_stderr_and_in_summary_json(capsys, tmp_path):
    rc = main([*SMALL, "--policy", "shift", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    notes = [ln for ln in err.splitlines() if ln.startswith("note: shift: base sp=4 chosen by memory")]
    assert rc == 0 and len(notes) == 1, err
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["notes"] == [notes[0].removeprefix("note: ")]
    summ, err = _json(capsys, "--policy", "shift", "--policy-arg", "base=sp=2;tp=2")  # asked for: nothing to note
    assert summ["notes"] == [] and "note:" not in err
    summ, err = _json(capsys, "--policy", "sidp")
    assert summ["notes"] and summ["notes"][0].startswith("sidp: default tp=1") and "note: sidp: default" in err
    assert _json(capsys, "--policy", "tp")[0]["notes"] == []
