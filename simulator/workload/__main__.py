"""`python -m simulator.workload describe|convert TRACE ...`."""
import sys

from .cli import main

sys.exit(main())
