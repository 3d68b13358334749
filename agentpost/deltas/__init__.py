"""DeltaS (arXiv 2609.27470): gated-DeltaNet state drift as a query-agnostic KV-retention signal.

- :mod:`agentpost.deltas.rule` — the gated delta rule (recurrent reference, chunked UT-transform form) and drift.
- :mod:`agentpost.deltas.retention` — sinks + recent + per-bucket top drift, and the alternative policies.
- :mod:`agentpost.deltas.recall` — the synthetic key-value recall stream (labelled synthetic, mechanism level).
- :mod:`agentpost.deltas.stream` — streaming a hybrid Qwen3.5-architecture LM chunk by chunk with eviction.
The Triton kernel is :mod:`agentpost.kernels.deltas`.
"""
