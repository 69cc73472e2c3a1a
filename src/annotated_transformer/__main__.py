"""``python -m annotated_transformer TASK {train,evaluate,predict} ...`` (see ``cli``)."""

import sys

from annotated_transformer.cli import main

sys.exit(main())
