"""`python -m darling_nemo.plan` (what slurm/common.sh runs): the `darling-plan` command."""

import sys

from darling_nemo.plan.cli import main

sys.exit(main())
