"""Expansion (the third-party 2+2 SST reading; the paper leaves the initialisation open): stage 2 initialises the
Decoder from the trained Prefiller.

``copy`` (default): Decoder layer :math:`\\ell'` takes the q/out projections, both RMSNorms and the FFN of the
Prefiller layer it reads, :math:`\\pi(\\ell')`, and the Decoder's final norm takes the Prefiller's; the Prefiller's
k/v projections have no Decoder counterpart (the Decoder writes no KV). ``random``: keep the fresh initialisation.
"""

from __future__ import annotations

import torch

from agentpost.kite.model import DenseLM, SSTLM

EXPANSION_INITS = ("copy", "random")


@torch.no_grad()
def expand(prefiller: DenseLM, sst: SSTLM, init: str = "copy") -> SSTLM:
    """Load a stage-1 ``prefiller`` into ``sst`` and initialise its Decoder by ``init``; returns ``sst``."""
    if init not in EXPANSION_INITS:
        raise ValueError(f"expansion init must be one of {EXPANSION_INITS}, got {init!r}")
    if prefiller.cfg != sst.cfg.prefiller:
        raise ValueError(f"stage-1 model {prefiller.cfg} does not match the SST's Prefiller {sst.cfg.prefiller}")
    sst.prefiller.load_state_dict(prefiller.state_dict())
    if init == "random":
        return sst
    if sst.cfg.d_ff_decode != prefiller.cfg.d_ff:
        raise ValueError(f"copy expansion needs d_ff_decode == d_ff ({sst.cfg.d_ff_decode} != {prefiller.cfg.d_ff})")
    for layer, src in zip(sst.decoder, sst.read_map):
        donor = prefiller.layers[src]
        for name in ("attn_norm", "q", "o", "ffn_norm", "ffn"):
            getattr(layer, name).load_state_dict(getattr(donor, name).state_dict())
    sst.norm_f.load_state_dict(prefiller.norm_f.state_dict())
    return sst
