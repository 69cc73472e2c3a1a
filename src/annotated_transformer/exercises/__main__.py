"""``python -m annotated_transformer.exercises CHAPTER`` (see ``exercises.cli``)."""

import sys

from annotated_transformer.exercises.cli import main

sys.exit(main())
