"""DeltaS (arXiv 2609.27470): gated-DeltaNet state drift as a query-agnostic KV-retention signal.

- :mod:`agentpost.deltas.rule` — the gated delta rule (recurrent reference, chunked UT-transform form) and drift.
- :mod:`agentpost.deltas.retention` — sinks + recent + per-bucket top drift, and the alternative policies.
- :mod:`agentpost.deltas.recall` — the synthetic key-value recall stream (labelled synthetic, mechanism level).
- :mod:`agentpost.deltas.hybrid` — a small hybrid gated-DeltaNet + full-attention LM (Hugging Face ``PreTrainedModel``).
- :mod:`agentpost.deltas.train_hybrid` — its WikiText-2 training script (checkpoint and receipt in ``assets/``).
- :mod:`agentpost.deltas.stream` — language modelling on a stream: drift per chunk, KV cut by each policy, NLL after.
- :mod:`agentpost.deltas.diagnostic` — both diagnostics' grids and paired verdicts.
The Triton kernel is :mod:`agentpost.kernels.deltas`.
"""
