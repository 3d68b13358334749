"""MuSeR (arXiv 2609.23677): long-history recommendation with hierarchical temporal compression, multi-query
interests, candidate-adaptive selection, ID + text-semantic items and a cached serving path.

- :mod:`~agentpost.muser.compression` — recent raw / mid and far pooled with growing strides (section 1);
- :mod:`~agentpost.muser.interests` — multi-query interests, orthogonality penalty, adaptive score (3, 5, 6);
- :mod:`~agentpost.muser.loss` — next-K contrastive objective, ID-semantic alignment (4, 6);
- :mod:`~agentpost.muser.model` — the user tower, the item encoder and a SASRec-style reference (2, 4);
- :mod:`~agentpost.muser.train` — prefixes, training, full-catalogue Recall@K / NDCG@K, popularity;
- :mod:`~agentpost.muser.serving` — cached long-term interests, staleness policies, the test-period replay (7);
- :mod:`~agentpost.muser.diagnostic` — the ablation arms and the chapter's runs.

The paper text was not available; formulas come from digests and a third-party re-implementation
(``../shared/papers/muser.md``).
"""
