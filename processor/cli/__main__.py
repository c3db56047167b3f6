"""``python -m processor.cli``: the ``sow`` command."""

import sys

from processor.cli import main

sys.exit(main())
