"""The `agentpost` command line (list, run, validate, ledger, book, refresh)."""

import sys


def main(argv=None) -> int:  # replaced by the full CLI in agentpost.run
    print("agentpost: command line under construction", file=sys.stderr)
    return 2
