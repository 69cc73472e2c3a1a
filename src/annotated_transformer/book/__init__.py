"""The book's machinery, kept apart from the Transformer: what the
chapters use to show things.

- :mod:`~annotated_transformer.book.sizes`: run sizes (``AT_SIZE``) and the
  repository's ``runs/`` folder, where chapters find finished command-line runs;
- :mod:`~annotated_transformer.book.viz`: Altair charts (heatmaps, line charts);
- :mod:`~annotated_transformer.book.source`: ``show_source``, the
  package's code in a chapter;
- :mod:`~annotated_transformer.book.page`: printed text wrapped to the page's
  84 columns (``wrap``, ``print_log``);
- :mod:`~annotated_transformer.training.progress`: progress bars that
  suit a terminal and Jupyter.
"""
