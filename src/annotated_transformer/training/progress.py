"""Progress bars: ``tqdm.auto`` (a widget in Jupyter when ipywidgets
is there, text otherwise).

Without ipywidgets, ``tqdm.auto`` warns "IProgress not found" when imported
in a kernel and falls back to the text bar; that warning would land in
every chapter that trains.
"""

import warnings

from tqdm import TqdmWarning

with warnings.catch_warnings():
    warnings.simplefilter("ignore", TqdmWarning)
    from tqdm.auto import tqdm

__all__ = ["tqdm"]
