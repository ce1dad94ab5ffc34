"""Ships the bundled sample traces in built wheels; everything else is declared in pyproject.toml.

The traces live at the repository's top level (traces/, next to the packages). A source checkout
or an editable install reads them there; a wheel carries a copy inside the simulator package
(simulator/traces/), where simulator.workload.files.bundled_traces_dir finds it once installed.
"""
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
TRACES = ("*.csv", "*.jsonl", "README.md")


class BuildPyWithTraces(build_py):
    """build_py that also copies traces/{*.csv,*.jsonl,README.md} to <build>/simulator/traces/."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # editable: read from the checkout's traces/
            return
        dest = Path(self.build_lib) / "simulator" / "traces"
        self.mkpath(str(dest))
        for pattern in TRACES:
            for src in sorted((ROOT / "traces").glob(pattern)):
                self.copy_file(str(src), str(dest / src.name))


setup(cmdclass={"build_py": BuildPyWithTraces})
