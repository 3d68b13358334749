"""``agentpost validate``: recompute every hash of a run and apply the GPU-evidence rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from agentpost.evidence import receipt as rc
from agentpost.evidence.recording import read_scraps
from agentpost.evidence.hashing import sha256_bytes, sha256_json
from agentpost.project import config

REQUIRED = ("schema_version", "chapter", "profile", "seed", "status", "run_key", "parameters", "hashes",
            "packages", "device", "timing", "peak_memory", "metrics", "receipt_sha256")


@dataclass(frozen=True)
class Problem:
    run: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.run}: {self.field}: {self.message}"


def validate_run(run_dir: Path) -> list[Problem]:
    """Problems with one run folder (empty list = valid)."""
    run_dir = Path(run_dir)
    name = run_dir.as_posix()
    receipt_path, nb_path = run_dir / rc.RECEIPT_NAME, run_dir / rc.NOTEBOOK_NAME
    if not receipt_path.is_file() or not nb_path.is_file():
        return [Problem(name, "files", f"needs {rc.RECEIPT_NAME} and {rc.NOTEBOOK_NAME}")]
    receipt = rc.load(receipt_path)
    problems = [Problem(name, key, "missing") for key in REQUIRED if key not in receipt]
    if problems:
        return problems
    if receipt["schema_version"] != rc.SCHEMA_VERSION:
        problems.append(Problem(name, "schema_version", f"{receipt['schema_version']} is not {rc.SCHEMA_VERSION}"))
    nb_bytes = nb_path.read_bytes()
    if sha256_bytes(nb_bytes) != receipt["hashes"].get("output_notebook"):
        problems.append(Problem(name, "hashes.output_notebook", "the output notebook was changed after the run"))
    params = {k: v for k, v in receipt["parameters"].items() if k != "seed"}
    if sha256_json(params) != receipt["hashes"].get("parameters"):
        problems.append(Problem(name, "hashes.parameters", "parameters do not match their hash"))
    if receipt["parameters"].get("seed") != receipt["seed"]:
        problems.append(Problem(name, "seed", "the injected seed differs from the receipt's seed"))
    scraps = read_scraps(nbformat.reads(nb_bytes.decode(), as_version=4))
    for key in sorted(set(scraps) | set(receipt["metrics"])):
        if key not in receipt["metrics"]:
            problems.append(Problem(name, f"metrics.{key}", "recorded in the notebook but missing from the receipt"))
        elif key not in scraps:
            problems.append(Problem(name, f"metrics.{key}", "in the receipt but not recorded in the notebook"))
        elif sha256_json(scraps[key]) != sha256_json(receipt["metrics"][key]):
            problems.append(Problem(name, f"metrics.{key}", "differs between receipt and output notebook"))
    if rc.seal(receipt)["receipt_sha256"] != receipt["receipt_sha256"]:
        changed = [p.field for p in problems] or ["(a field)"]
        problems.append(Problem(name, "receipt_sha256", f"the receipt was edited after sealing ({', '.join(changed)})"))
    return problems


def configuration_key(receipt: dict) -> str:
    """Everything about a run except its seed: seeds of one configuration share this key."""
    hashes = {k: v for k, v in receipt["hashes"].items() if k != "output_notebook"}
    return sha256_json({"chapter": receipt["chapter"], "profile": receipt["profile"], **hashes})


def gpu_device_allowed(device: dict) -> bool:
    return device.get("kind") == "cuda" and any(a.lower() in str(device.get("name", "")).lower() for a in config()["gpu_allow"])


def gpu_evidence_problems(receipts: list[dict]) -> list[str]:
    """Why a set of same-configuration runs does not count as GPU evidence (empty list = it does)."""
    reasons = []
    bad = [r["seed"] for r in receipts if not gpu_device_allowed(r["device"])]
    if bad:
        reasons.append(f"seeds {bad} did not run on an allowed CUDA device ({', '.join(config()['gpu_allow'])})")
    failed = [r["seed"] for r in receipts if r["status"] != "ok"]
    if failed:
        reasons.append(f"seeds {failed} failed")
    if len({configuration_key(r) for r in receipts}) > 1:
        reasons.append("runs differ in more than the seed (notebook, parameters, code or data)")
    seeds = {r["seed"] for r in receipts if r["status"] == "ok"}
    if len(seeds) < config()["min_seeds"]:
        reasons.append(f"{len(seeds)} successful seeds; at least {config()['min_seeds']} are needed")
    return reasons
