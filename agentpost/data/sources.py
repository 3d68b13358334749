"""What the project's public data sets are: their files, their hub copies with pinned sizes and sha256, and the
errors raised when one is missing or differs (the leaf of agentpost.data: it imports nothing of the project, so
:mod:`agentpost.data.registry` and :mod:`agentpost.data.hf` both build on it without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass

#: Data set name -> the files every chapter may read (all listed in the data set's SOURCE.md with checksums).
DATASETS: dict[str, tuple[str, ...]] = {
    "wikitext-2": ("train.txt", "valid.txt", "test.txt"),
    "stabletoolbench": ("apis.jsonl", "queries.jsonl"),
    "gsm8k": ("train.jsonl", "test.jsonl"),
    "movietweetings-100k": ("movies.dat", "ratings.dat"),
}


@dataclass(frozen=True)
class HubSource:
    """A data set's public copy on the Hugging Face hub: ``files`` maps each local file to (hub split, bytes, sha256)."""

    repo: str
    config: str
    files: dict[str, tuple[str, int, str]]


#: The hub fallback (used only where no local copy exists, and kept only if it matches its checksums); sizes and sha256
#: are those of the files' SOURCE.md (tests/unit/test_data_datasets.py checks that they agree).
HUB_SOURCES: dict[str, HubSource] = {
    "gsm8k": HubSource(
        "openai/gsm8k",
        "main",
        {
            "train.jsonl": ("train", 4166206, "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
            "test.jsonl": ("test", 749738, "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"),
        },
    ),
    "wikitext-2": HubSource(
        "Salesforce/wikitext",
        "wikitext-2-v1",
        {
            "train.txt": ("train", 10797148, "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f"),
            "valid.txt": ("validation", 1121681, "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8"),
            "test.txt": ("test", 1256449, "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0"),
        },
    ),
}


class DataMissingError(FileNotFoundError):
    """A public data set or one of its files is not available locally."""


class DataChecksumError(ValueError):
    """A data file differs from the size or sha256 its data set's SOURCE.md records."""
