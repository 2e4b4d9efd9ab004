"""``python -m docpc_retrievers.eval.synthetic``: write a corpus (see :func:`.writing.main`)."""

import sys

from docpc_retrievers.eval.synthetic.writing import main

sys.exit(main())
