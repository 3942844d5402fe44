"""``python -m flexjobs_local up | down | demo``: the embedded stack's commands (``./dev`` runs
them from the clone's root)."""

import sys

from flexjobs_local.cli_local import main

sys.exit(main())
