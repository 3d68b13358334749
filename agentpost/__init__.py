"""agentpost: tested implementations and executable evidence for LLM-agent efficiency and post-training papers."""

import sys

__version__ = "0.1.0"


def _plain_progress_bars_in_kernels() -> None:
    """Inside a Jupyter kernel without ipywidgets, ``tqdm.auto`` (used by transformers, datasets and our chapters)
    warns "IProgress not found" into a cell's stderr, which the book then publishes, and falls back to the plain
    text bar. Chapter progress bars are plain text by design (a papermill run has no widget front end), so import
    ``tqdm.auto`` once with exactly that warning filtered; it resolves to the text bar as before."""
    if "ipykernel" not in sys.modules:
        return
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found")
        import tqdm.auto  # noqa: F401  (cached: later imports get the same plain bar, without the warning)


_plain_progress_bars_in_kernels()
