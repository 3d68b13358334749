"""ToolSearcher (arXiv 2609.30906): event-level credit for multi-turn tool search (toolsearcher.md).

- :mod:`~agentpost.toolsearcher.credit` — first-discovery events, per-tool group credit, event advantages, the
  selection reward and the search-then-select gate (eqs. 1-5);
- :mod:`~agentpost.toolsearcher.loss` — credit on assistant segments and the clipped, KL-regularised loss with
  tool-response tokens masked (eqs. 6-7), on top of :mod:`agentpost.rl`;
- :mod:`~agentpost.toolsearcher.retrieval` — MiniLM (pinned, sha256-checked) and BM25 retrievers over
  StableToolBench's API docs, retrieval-only baselines;
- :mod:`~agentpost.toolsearcher.env` — the strict multi-turn search protocol;
- :mod:`~agentpost.toolsearcher.policy`, :mod:`~agentpost.toolsearcher.train` — the compact CPU policy, its token
  layout, training with ToolSearcher credit or outcome GRPO (with the CCTD schedule) and evaluation;
"""
