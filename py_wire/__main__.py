"""``python -m py_wire``: the ``py-wire`` command line."""

import sys

from py_wire.cli import main

sys.exit(main())
