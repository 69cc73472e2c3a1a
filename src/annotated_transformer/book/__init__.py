"""The book's machinery, kept apart from the Transformer: what the
chapters use to show things.

- :mod:`~annotated_transformer.book.sizes`: run sizes (``AT_SIZE``) and the
  repository's ``runs/`` folder, where chapters find finished command-line runs;
- :mod:`~annotated_transformer.book.viz`: Altair charts (heatmaps, line charts);
- :mod:`~annotated_transformer.book.explore`: explorable charts (controls that
  work without a kernel); :mod:`~annotated_transformer.book.try_it`: the try-it
  cells' helpers, each loading the published model it runs;
- :mod:`~annotated_transformer.book.figures`: the diagrams, as hand-written SVG;
- :mod:`~annotated_transformer.book.source`: ``show_source``, the
  package's code in a chapter, and :mod:`~annotated_transformer.book.listings`,
  which renders those listings again when the code changes;
- :mod:`~annotated_transformer.book.page`: printed text wrapped to the page's
  84 columns (``wrap``, ``print_log``);
- :mod:`~annotated_transformer.book.results`: the Results page, from the run
  records.

The top layer of the package: it may import any other (see
``tests/test_layout.py``).
"""

from annotated_transformer.book import rendering

# Every chart a chapter shows (each imports from here) is a Vega-Lite MIME bundle,
# which Jupyter and the site draw offline: see rendering.
rendering.enable()
