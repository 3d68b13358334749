"""Papermill execution of chapter notebooks: run planning (:mod:`~agentpost.run.params`), cache keys, backends,
batches, re-certification, and the GPU machine's plan (:mod:`~agentpost.run.gpu_plan`). Importing the package imports
none of them, so the GPU plan starts on a bare image (standard library and PyYAML)."""
