"""``python -m processor.config``: print the settings table of docs/operations.md."""

import sys

from processor.config.docs import settings_table

sys.stdout.write(settings_table())
