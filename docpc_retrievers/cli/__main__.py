"""``python -m docpc_retrievers.cli``: the same as the ``docpc`` command."""

import sys

from docpc_retrievers.cli.app import main

sys.exit(main())
