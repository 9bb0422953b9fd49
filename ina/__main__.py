"""`python -m ina` is the `ina` command."""

import sys

try:
    from ina.cli import main
except KeyboardInterrupt:  # Ctrl-C before the command line is even read: one line, 130
    print("ina: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
