"""agentpost: tested implementations and executable evidence for LLM-agent efficiency and post-training papers."""

import sys

__version__ = "0.1.0"


def _plain_progress_bars_in_kernels() -> None:
    """Chapter progress bars are plain text by design (a papermill run has no widget front end; a widget bar would be
    published in the book as its text repr). Inside a Jupyter kernel, ``tqdm.auto`` (used by transformers, datasets
    and our chapters) picks the ipywidgets bar when ipywidgets is installed (the chapters' "Turn it by hand" controls
    need it), and warns "IProgress not found" into a cell's stderr when it is not. Import ``tqdm.auto`` once with
    tqdm's widget hidden and that warning filtered: it resolves to the plain text bar either way (cached for later
    imports)."""
    if "ipykernel" not in sys.modules:
        return
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import tqdm.notebook

        widget, tqdm.notebook.IProgress = tqdm.notebook.IProgress, None
        try:
            import tqdm.auto  # noqa: F401
        finally:
            tqdm.notebook.IProgress = widget


_plain_progress_bars_in_kernels()
