"""Finding one's way in `simulate` (issue 17, points 5-9): --help shows the defaults, a bare `simulate`
shows usage, `simulate policies` lists every policy's knobs from the policies' own defaults, knobs go
per policy in --compare, --describe --format json, --version."""
import dataclasses
import json
import re

import pytest

import simulator.apps.cli as cli
from perfmodel import knobs
from simulator.apps.cli import compare_items, main
from simulator.policies import POLICIES
from simulator.policies.catalog import KNOBS, catalog, knob_names
from simulator.policies.flying.config import FlyingConfig

SMALL = ["--model", "llama-3.1-8b", "--hardware", "h100", "--profile", "none", "--gpus", "2",
         "--trace", "synthetic:poisson?n=20&rate=4&input=128&output=8"]


# 5. --help with defaults; bare `simulate`

def test_help_shows_the_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for shown in ("(default: llama-3.3-70b)", "(default: h200)", "(default: 8)", "(default: shift)",
                  "default: the checkpoint's own format", "(default: burstgpt.csv)", "(default: vllm)",
                  "(default: table)"):
        assert shown in text, shown
    for sub in (["sweep", "--help"], ["validate", "--help"], ["policies", "--help"]):
        with pytest.raises(SystemExit):
            main(sub)
        assert "(default: " in capsys.readouterr().out, sub


def test_bare_simulate_prints_usage_and_exits_2(capsys, monkeypatch):
    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("a bare simulate ran a simulation"))
    assert main([]) == 2
    cap = capsys.readouterr()
    assert "simulate --trace burstgpt.csv --policy shift --out out/ --plot" in cap.err and cap.out == ""


# 6. simulate policies

def test_policies_lists_every_policy_with_its_knobs(capsys):
    assert main(["policies", "--format", "json"]) == 0
    rows = {r["policy"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == set(POLICIES)
    shift = {k["name"]: k for k in rows["shift"]["knobs"]}
    assert shift["threshold"]["default"] == knobs.SHIFT_THRESHOLD_TOKENS and shift["threshold"]["source"]
    sidp = {k["name"]: k["default"] for k in rows["sidp"]["knobs"]}
    assert sidp["hysteresis"] == knobs.SIDP_HYSTERESIS_DECISIONS and sidp["ctx"] == knobs.SIDP_B_STAR_CONTEXT_TOKENS
    fly = {k["name"]: k["default"] for k in rows["flying"]["knobs"]}
    assert fly == {f.name: f.default for f in dataclasses.fields(FlyingConfig)}
    assert rows["tp"]["knobs"] == [] and rows["shift"]["layout"]
    assert main(["policies"]) == 0
    text = capsys.readouterr().out
    assert re.search(rf"threshold \(int, default {knobs.SHIFT_THRESHOLD_TOKENS}\)", text)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_catalog_names_exactly_the_knobs_each_policy_parses(policy):
    """Each policy's own parse_args is the authority: an unknown argument's error lists what it takes."""
    with pytest.raises(ValueError, match="unknown policy argument") as e:
        POLICIES[policy](policy=policy, layout=None, spec=None, hw=None, gpus=8, fw=None, policy_args={"no_such_knob": "1"})
    allowed = str(e.value).partition("allowed ")[2]
    assert sorted(knob_names(policy)) == ([] if allowed == "none" else sorted(allowed.split(", ")))
    assert all(k.meaning and k.source for k in KNOBS[policy])
    assert {r["policy"] for r in catalog()} == set(POLICIES)


# 7. knobs per policy in --compare

def test_compare_items_tell_layout_from_knobs():
    assert compare_items("tp,shift:threshold=256") == [("tp", None, ()), ("shift", None, (("threshold", "256"),))]
    assert compare_items("tp,layout:tp=2,pp=4") == [("tp", None, ()), ("layout", "tp=2,pp=4", ())]
    assert compare_items("shift:sp=2,tp=2,threshold=64") == [("shift", "sp=2,tp=2", (("threshold", "64"),))]
    assert compare_items("sidp:tp=2,dp=2") == [("sidp", None, (("tp", "2"), ("dp", "2")))]  # sidp's own knobs
    with pytest.raises(ValueError, match="shift takes no 'foo'"):
        compare_items("tp,shift:foo=1")
    with pytest.raises(ValueError, match="tp takes no 'threshold'"):
        compare_items("tp:threshold=1,shift")


def _runs(capsys, *argv) -> list:
    assert main([*SMALL, "--format", "json", *argv]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_compare_gives_each_policy_its_own_knobs(capsys, monkeypatch):
    seen = []
    real = cli.run

    def spy(wl, spec, **kw):
        seen.append((spec.policy, spec.policy_args))
        return real(wl, spec, **kw)
    monkeypatch.setattr(cli, "run", spy)
    runs = _runs(capsys, "--compare", "tp,shift:threshold=1")
    assert seen == [("tp", ()), ("shift", (("threshold", "1"),))]
    assert [r["policy"] for r in runs] == ["tp", "shift"]
    seen.clear()
    _runs(capsys, "--compare", "tp,shift", "--policy-arg", "threshold=1")  # only shift takes threshold
    assert seen == [("tp", ()), ("shift", (("threshold", "1"),))]
    seen.clear()
    _runs(capsys, "--compare", "tp,shift:threshold=2", "--policy-arg", "threshold=1")  # the item's own wins
    assert seen == [("tp", ()), ("shift", (("threshold", "2"),))]
    assert main([*SMALL, "--compare", "tp,shift:threshold=1"]) == 0  # the table names the item
    assert capsys.readouterr().out.splitlines()[1].split() == ["metric", "tp", "shift:threshold=1"]


def test_policy_arg_no_compared_policy_takes_is_an_error(capsys, monkeypatch):
    monkeypatch.setattr(cli, "run", lambda *a, **k: pytest.fail("refused only after a run started"))
    assert main([*SMALL, "--compare", "tp,dp", "--policy-arg", "threshold=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --policy-arg threshold: none of the compared policies") and "\n" not in err


# 8, 9. --describe --format json, --version

def test_describe_format_json(capsys):
    assert main([*SMALL, "--describe", "--format", "json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["requests"] == 20 and "notes" in s


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("simulate ") and out.split()[1] == cli.package_version() != ""


def test_plot_cdf_writes_the_cdf_figure(tmp_path, monkeypatch):
    """`--plot cdf` picks the CDF figure (plots.cdf_figure) and names the file cdf.png."""
    import simulator.results.plots as plots
    from simulator.apps.cli import main

    seen = []
    real = plots.cdf_figure
    monkeypatch.setattr(plots, "cdf_figure", lambda runs, title=None: seen.append(title) or real(runs, title=title))
    rc = main(["--trace", "synthetic:poisson?n=20&rate=4&input=128&output=8", "--policy", "tp", "--gpus", "1",
               "--model", "llama-3.1-8b", "--hardware", "h100", "--out", str(tmp_path), "--plot", "cdf"])
    assert rc == 0 and (tmp_path / "cdf.png").is_file() and not (tmp_path / "timeline.png").exists()
    assert seen and "llama-3.1-8b" in seen[0]
