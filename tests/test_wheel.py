"""Packaging (issue 17). A built wheel is complete: installed without the checkout beside it, it
carries the bundled traces, model configs, hardware presets and calibration profiles, and the main
job runs. The main job's install (`make run`: requirements-run.txt) has no torch and no Ray, while
`make test` installs everything with torch pinned to the CPU build.

The wheel is built offline from a copy of the working tree (so no build/ appears in the checkout)
with this interpreter's setuptools, installed with --no-deps into a folder of its own, and run from
a directory outside the repository by `python -S` with that folder first on the path and this
environment's site-packages after it for numpy/pandas/... (-S: no .pth file runs, so the editable
install's finder cannot map `simulator` back to the checkout)."""
import json
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SKIP = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
                              ".hypothesis", "out", ".ipynb_checkpoints", "*.whl")

RUN = r"""
import json, sys
from pathlib import Path
site = Path(sys.argv[1]).resolve()
import perfmodel, simulator
from simulator.workload import bundled_traces, bundled_traces_dir
assert Path(simulator.__file__).resolve().is_relative_to(site), simulator.__file__
assert Path(perfmodel.__file__).resolve().is_relative_to(site), perfmodel.__file__
assert bundled_traces_dir().resolve().is_relative_to(site), bundled_traces_dir()
print(json.dumps({"traces": bundled_traces()}))
from simulator.apps.cli import main
sys.exit(main(["--trace", "burstgpt.csv", "--policy", "tp", "--gpus", "1", "--model", "llama-3.1-8b",
               "--hardware", "h100", "--format", "json", "--time-window", "0:120"]))
"""


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    """A copy of the working tree: builds and metadata runs write there, not into the checkout."""
    src = tmp_path_factory.mktemp("tree") / "src"
    shutil.copytree(REPO, src, ignore=SKIP)
    return src


@pytest.fixture(scope="module")
def wheel(src, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "--no-index", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"pip wheel failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    (whl,) = (tmp / "dist").glob("parallelism_sim-*.whl")
    return whl


@pytest.mark.slow
def test_wheel_carries_the_bundled_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, pattern in (("traces", "*.csv"), ("perfmodel/models", "*.json"),
                            ("perfmodel/hardware", "*.toml"), ("perfmodel/profiles", "*.json")):
        files = sorted((REPO / folder).glob(pattern))
        assert files, f"nothing bundled in {folder}/?"
        inside = "simulator/traces" if folder == "traces" else folder
        missing = [f.name for f in files if f"{inside}/{f.name}" not in names]
        assert not missing, f"wheel lacks {inside}/: {missing}"
    assert not any(n.startswith(("traces/", "tests/", "notebooks/")) for n in names)  # no stray top-level packages


@pytest.mark.slow
def test_installed_wheel_runs_the_main_job_outside_the_checkout(wheel, tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"pip install failed:\n{r.stderr[-3000:]}"
    deps = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MPLBACKEND": "Agg",
           "PYTHONPATH": ":".join([str(site), *deps])}
    r = subprocess.run([sys.executable, "-S", "-c", RUN, str(site)], cwd=elsewhere, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"installed run failed (rc {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    first, rest = r.stdout.split("\n", 1)
    assert {"burstgpt.csv", "bursty_onoff.csv"} <= set(json.loads(first)["traces"])
    summary = json.loads(rest)
    assert summary["completed"] > 0 and summary["model"] == "llama-3.1-8b"
    assert summary["hardware"] == "h100_sxm" and summary["profile"] == "h100_sxm"  # the bundled calibration
    assert summary["trace"].endswith("burstgpt.csv")


def _requirements(path: Path) -> list[str]:
    """Requirement lines of a requirements file, `-r` includes followed, comments dropped."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith(("-r ", "--requirement ")):
            out += _requirements(path.parent / line.split(None, 1)[1])
        elif line:
            out.append(line)
    return out


def _make_n(target: str) -> str:
    """The commands `make TARGET` would run from scratch (dry run, every target out of date)."""
    r = subprocess.run(["make", "-n", "-B", target], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_make_run_installs_only_the_core():
    run = _make_n("run")
    installs = re.findall(r"pip install .*", run)
    assert installs and all("-r requirements-run.txt" in cmd for cmd in installs), installs
    assert "requirements-cpu.txt" not in run
    reqs = _requirements(REPO / "requirements-run.txt")
    assert reqs == ["-e ."], reqs  # the package without extras: pyproject.toml's core dependencies
    core = " ".join(json.dumps(d) for d in _core_dependencies())
    assert not re.search(r"\b(torch|ray|nvidia|pytest|hypothesis|nbclient|ipykernel)\b", core), core


def test_make_test_installs_everything_with_cpu_torch_pinned():
    test = _make_n("test")
    assert "-r requirements-cpu.txt" in test and "pytest" in test
    reqs = _requirements(REPO / "requirements-cpu.txt")
    torch = [r for r in reqs if re.match(r"torch\b", r)]
    assert torch == ["torch==2.13.0"], f"torch must be pinned to the CPU build: {torch}"
    editable = [r for r in reqs if r.startswith("-e ")]
    assert editable and all(x in editable[0] for x in ("torch", "dev", "ray")), editable


def _core_dependencies() -> list[str]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]


def test_main_job_runs_without_torch_or_ray(tmp_path):
    """`make run`'s command on the bundled defaults (first minute of the trace) with torch, Ray and
    the test tools unimportable, as in the core install."""
    code = ("import sys\n"
            "for m in ('torch', 'ray', 'pytest', 'hypothesis', 'nbclient', 'nbformat', 'ipykernel'):\n"
            "    sys.modules[m] = None  # import m raises ImportError\n"
            "from simulator.apps.cli import main\n"
            "sys.exit(main(['--trace', 'burstgpt.csv', '--policy', 'shift', '--time-window', '0:60']))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "median_ttft_ms" in r.stdout


@pytest.mark.slow
def test_core_install_resolves_without_torch_or_ray(src):
    """What pip would install for `make run` (a dry run from the local package index): no torch, no Ray."""
    report = src.parent / "report.json"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                        "--no-build-isolation", "-q", "--report", str(report), "-r", "requirements-run.txt"],
                       cwd=src, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    names = {i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]}
    assert {"parallelism-sim", "numpy", "pandas", "simpy", "matplotlib"} <= names, names
    assert not names & {"torch", "ray", "nvidia-ml-py", "pytest", "hypothesis", "ipykernel"}, names
