"""Local-first loaders for the public data sets (README, "The two commands", says where they are looked for).

A data set is resolved in this order: ``$AGENTPOST_DATA/<name>``; ``../shared/data/<name>`` beside the project
checkout; otherwise the public source, which needs network access and is never taken by the tests. Every file a
loader reads is recorded so the runner can hash it into the receipt.
"""

from agentpost.data.registry import DATASETS, DataMissingError, dataset_dir, data_file, files_read

__all__ = ["DATASETS", "DataMissingError", "dataset_dir", "data_file", "files_read"]
