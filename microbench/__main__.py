"""`python -m microbench ...` (also what `torchrun --nproc-per-node N -m microbench ...` runs)."""
import sys

from .cli import main

sys.exit(main())
