"""`python -m ina` is the `ina` command."""

import sys

from ina.cli import main

sys.exit(main())
