"""``python -m flexjobs.cli``: the ``flexjobs`` command, without its console script."""

import sys

from flexjobs.cli import main

sys.exit(main())
