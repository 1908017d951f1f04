"""``python -m ms_heron.cli``: the ``ms-heron`` command."""

import sys

from . import main

sys.exit(main())
