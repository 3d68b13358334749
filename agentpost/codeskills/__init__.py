"""agentpost.codeskills: code-based skills for language agents (CodeHack, arXiv 2609.31076) on real MiniHack.

Modules: ``env`` (MiniHack construction, explicit seeding, termination vs truncation), ``bot`` (the Bot API:
parsed glyphs/messages/inventory, BFS navigation), ``skills`` (skills as generator functions over the Bot),
``runtime`` (action spaces, budgets, the episode loop), ``controllers`` (random, scripted, LLM policy),
``search`` (the greedy search controller: each decision dry-runs every skill and key on a model of the Bot's map),
``maps`` (hand-made des-file maps for the mechanism tests), ``diagnostic`` (the paired diagnostic), ``sft``
(fine-tuning the small LM on scripted-controller traces for the a100 profile).
"""
