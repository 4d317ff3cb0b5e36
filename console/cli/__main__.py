"""`python -m console.cli`: the `eagle3` command."""

import sys

from console.cli import main

sys.exit(main())
