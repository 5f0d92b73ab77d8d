"""transformers kept quiet: its logging, progress bars and Python warnings."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

from attnviz.errors import AttnvizWarning


@contextlib.contextmanager
def quiet(verbose: bool) -> Iterator[None]:
    """Silence transformers' logging, progress bars and Python warnings unless verbose
    (attnviz's own warnings pass); whatever was set before is set again afterwards."""
    if verbose:
        yield
        return
    from transformers.utils import logging as hf_logging

    previous = hf_logging.get_verbosity()
    bars_were_on = hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # attnviz's own still reach the user: said once, as the caller's filters would
            warnings.filterwarnings("default", category=AttnvizWarning)
            yield
    finally:
        hf_logging.set_verbosity(previous)
        if bars_were_on:
            hf_logging.enable_progress_bar()
