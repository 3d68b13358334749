"""Receipts, their compact storage, validation, comparisons across seeds, re-certification and the evidence ledger:
what reads runs. What a notebook calls to record them is :mod:`agentpost.record`, which imports nothing of this."""
