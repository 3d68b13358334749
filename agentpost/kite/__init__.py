"""agentpost.kite: the Step Scale Transformer (KITE, arXiv 2609.27294) - a KV-writing Prefiller tower and a
KV-reading Decoder tower - with dense baselines, FLOP counts, a request cost model, training and latency tools.

Modules: ``model`` (towers, :class:`~agentpost.kite.model.KVCache`), ``expansion`` (stage-2 init), ``flops``
(analytic counts, profiler check, budget matching), ``cost`` (request cost model, the paper's estimates),
``train`` and ``diagnostic`` (WikiText-2), ``latency`` (prefill/decode timing).
"""
