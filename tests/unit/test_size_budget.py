"""Evidence is data that must travel: a lent GPU machine receives the working tree only up to 64 MiB, so the tracked
tree stays under 60 MiB, the committed runs under 25 MB and the kernel-path spread files under 2 MB (README,
"Evidence that travels"). A failure names the largest files."""

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUDGETS = {"": 60 * 2**20, "book/runs": 25_000_000, "book/spread": 2_000_000}


def tracked_sizes() -> dict[str, int]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked tree is what git lists")
    files = [f for f in out.decode().split("\0") if f]
    return {f: (ROOT / f).stat().st_size for f in files if (ROOT / f).is_file() and not (ROOT / f).is_symlink()}


@pytest.mark.parametrize("folder", list(BUDGETS), ids=lambda f: f or "tracked-tree")
def test_tracked_evidence_fits_its_budget(folder):
    sizes = {f: s for f, s in tracked_sizes().items() if not folder or f.startswith(folder + "/")}
    total, budget = sum(sizes.values()), BUDGETS[folder]
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:8]
    assert total <= budget, (
        f"{folder or 'the tracked tree'}: {total / 1e6:.1f} MB > {budget / 1e6:.1f} MB; largest: "
        + ", ".join(f"{f} ({s / 1e6:.2f} MB)" for f, s in largest)
    )
