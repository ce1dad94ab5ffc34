"""The analytical performance model. Importing it first decides whether the compiled core (perfmodel/native.py:
StepTable here, the simulator's engine) runs compiled or from its sources, before any of it is imported."""
from . import native

native.use_sources_if()
