"""``python -m scrutiny.cli``: the same as the ``scrutiny`` command."""

import sys

from scrutiny.cli.main import main

sys.exit(main())
