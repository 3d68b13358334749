"""Many independent copies of the character GRU trained at once (one batched forward for every arm and seed).

Copy a has its own parameters (the leading dimension of every tensor); a loss that is a sum over copies gives
each copy the gradient of its own loss, and Adam is element-wise, so the copies are exactly independent runs that
share only the wall clock. The cell is PyTorch's ``nn.GRU`` cell (gates r, z, n; tested equal to it):
r = s(W_ir x + b_ir + W_hr h + b_hr), z = s(W_iz x + b_iz + W_hz h + b_hz), n = tanh(W_in x + b_in + r (W_hn h + b_hn)),
h' = (1 - z) n + z h.
"""

from __future__ import annotations

import torch
from torch import nn

from agentpost.madrl.gru import CharGRU


class StackedGRU(nn.Module):
    """``copies`` independent replicas of a one-layer :class:`CharGRU`, all initialised from ``base``."""

    def __init__(self, base: CharGRU, copies: int):
        super().__init__()
        if base.config.layers != 1:
            raise ValueError(f"StackedGRU supports one-layer GRUs, got {base.config.layers} layers")
        rnn = base.rnn

        def rep(t: torch.Tensor) -> nn.Parameter:
            return nn.Parameter(t.detach().clone().unsqueeze(0).repeat(copies, *([1] * t.ndim)))

        self.copies = copies
        self.embed = rep(base.embed.weight)
        self.w_ih, self.b_ih = rep(rnn.weight_ih_l0), rep(rnn.bias_ih_l0)
        self.w_hh, self.b_hh = rep(rnn.weight_hh_l0), rep(rnn.bias_hh_l0)
        self.w_out, self.b_out = rep(base.head.weight), rep(base.head.bias)

    def forward(self, ids: torch.Tensor, h: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """ids [A, B, T] -> logits [A, B, T, V] and the last hidden state [A, B, H]."""
        a, b, t = ids.shape
        x = self.embed[torch.arange(a, device=ids.device)[:, None, None], ids]  # [A, B, T, E]
        gi = torch.baddbmm(self.b_ih[:, None], x.reshape(a, b * t, -1), self.w_ih.transpose(1, 2)).view(a, b, t, -1)
        if h is None:
            h = torch.zeros(a, b, self.w_hh.shape[-1], dtype=x.dtype, device=x.device)
        outs = []
        w_hh_t = self.w_hh.transpose(1, 2)
        for s in range(t):
            gh = torch.baddbmm(self.b_hh[:, None], h, w_hh_t)
            ir, iz, inn = gi[:, :, s].chunk(3, -1)
            hr, hz, hn = gh.chunk(3, -1)
            r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
            h = (1 - z) * torch.tanh(inn + r * hn) + z * h
            outs.append(h)
        out = torch.stack(outs, 2)  # [A, B, T, H]
        logits = torch.baddbmm(self.b_out[:, None], out.reshape(a, b * t, -1), self.w_out.transpose(1, 2))
        return logits.view(a, b, t, -1), h
