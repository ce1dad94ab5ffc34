"""perfmodel.deploy resolves strategy names for every tool, and library code never imports a CLI
module (resolve_profile lives in perfmodel.calibration.profile, not perfmodel.cli)."""
import ast
from pathlib import Path

import pytest

from perfmodel import deploy, estimate
from perfmodel.calibration.profile import default_profile, load_profile, resolve_profile
from perfmodel.hardware import load_hardware
from perfmodel.layout import ParallelLayout
from perfmodel.modelspec import load_model

REPO = Path(__file__).resolve().parents[1]
LIBRARIES = ("perfmodel", "simulator", "kernels", "microbench")
MOVED = ("Deployment", "deployment", "instance_layout", "_min_tp", "SHIFT_MIN_KV_FRACTION")


def test_deployment_is_defined_in_deploy_and_nowhere_else():
    assert deploy.Deployment.__module__ == deploy.deployment.__module__ == "perfmodel.deploy"
    for name in ("Deployment", "_min_tp", "SHIFT_MIN_KV_FRACTION"):  # estimate uses only the other two
        assert not hasattr(estimate, name), name


def _imports(path: Path):
    """(module imported from, names) of every `from X import names` in a file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            yield "." * node.level + (node.module or ""), [a.name for a in node.names]


def _sources():
    for folder in (*LIBRARIES, "tests", "benchmarks", "notebooks"):
        yield from (REPO / folder).rglob("*.py")


def test_nobody_imports_deployments_from_estimate():
    bad = [f"{p.relative_to(REPO)}: {mod} {names}" for p in _sources() for mod, names in _imports(p)
           if mod.endswith("estimate") and set(names) & set(MOVED)]
    bad += [f"{p.relative_to(REPO)}: {line.strip()}" for p in REPO.glob("notebooks/nb_cells*.py")
            for line in p.read_text().splitlines()  # notebook cells are strings: read their lines
            if "estimate import" in line and any(n in line for n in MOVED)]
    assert not bad, bad


def test_library_modules_never_import_a_cli_module():
    """A CLI may import another CLI (perfmodel.cli adds calibration.cli's subcommands); nothing else may."""
    bad = []
    for pkg in LIBRARIES:
        for p in (REPO / pkg).rglob("*.py"):
            if p.stem in ("cli", "__main__"):
                continue
            for mod, names in _imports(p):
                if mod.split(".")[-1] == "cli" or "cli" in names:
                    bad.append(f"{p.relative_to(REPO)}: from {mod} import {', '.join(names)}")
    assert not bad, bad


def test_resolve_profile():
    h100, a10 = load_hardware("h100"), load_hardware("a10")
    assert resolve_profile(h100, "none") is None  # the datasheet roofline, asked for by name
    assert resolve_profile(h100, None) is default_profile(h100) is load_profile("h100_sxm")
    assert resolve_profile(a10, None) is None  # no shipped profile for this GPU
    assert resolve_profile(a10, "h200_sxm") is load_profile("h200_sxm")
    with pytest.raises(ValueError, match="unknown profile"):
        resolve_profile(h100, "no_such_profile")


@pytest.mark.parametrize("model,base", [("llama-3.3-70b", ParallelLayout(sp=8)),
                                        ("llama-4-scout-17b-16e", ParallelLayout(tp=2, sp=4))])
def test_shift_bases_are_the_papers(model, base):
    """SHIFT_MIN_KV_FRACTION's source: it picks the Shift paper's bases on 8 x H200 (fp8 weights)."""
    dep = deploy.deployment("shift", load_model(model, weights="fp8"), load_hardware("h200"), 8)
    assert dep.base == base and dep.shift == ParallelLayout(tp=8)


def test_instance_layout_keeps_the_expert_group_span():
    assert deploy.instance_layout(ParallelLayout(tp=2, dp=4)) == ParallelLayout(tp=2)
    assert deploy.instance_layout(ParallelLayout(tp=1, dp=8, ep=8)) == ParallelLayout(tp=1, dp=8, ep=8)
