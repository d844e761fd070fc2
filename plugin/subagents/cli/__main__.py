"""``python -m subagents.cli``: the same as the ``subagents`` command."""

import sys

from subagents.cli.main import main

sys.exit(main())
