"""`python -m bridge.cli`: the `plateau` command without its console script."""

import sys

from bridge.cli import main

sys.exit(main())
