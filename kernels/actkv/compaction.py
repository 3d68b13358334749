"""Compaction of a paged cache to a keep set: in place (Algorithm 4) and gather-based (baseline).

Per request with ``n`` live entries in ``Y = ceil(n/bs)`` blocks and ``B = |keep|`` survivors (Alg. 4):
``X = ceil(B/bs)``, ``start = (Y-X)*bs``, ``end = start + B``; ``dst`` = evicted slots inside ``[start, end)``,
``src`` = kept slots outside it (``|src| = |dst|``, disjoint), so every copy runs in one parallel pass with no
scratch buffer. Afterwards the survivors fill logical ``[start, end)``, the first ``Y-X`` logical blocks return
to the allocator and the block table shifts left by ``Y-X``. ``perm[r, j]`` is the old logical index of the
entry now at position ``j``: permute every per-token array with it (``meta[r, :B] = meta[r, perm[r, :B]]``).

The gather baseline ("paged R-KV style") copies survivors in order into a workspace and back into the first
``X`` logical blocks, freeing blocks ``[X, Y)``; it moves ``2B`` slots against in-place's ``|src| <= B``.

All functions mutate ``k_cache``, ``v_cache``, ``block_table`` and ``seq_lens`` in place and return
``(freed_blocks [R, max_freed], perm [R, max_B])``, both padded with -1.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ._common import check_cache, check_table, slot_index
from .copy_rows import copy_rows


class CompactionPlan(NamedTuple):
    """Index plan of Algorithm 4 for a batch of requests (all tensors on the cache's device)."""

    src_slots: torch.Tensor  # [P] flat physical source slots (kept, outside the window)
    dst_slots: torch.Tensor  # [P] flat physical destination slots (evicted, inside the window)
    perm: torch.Tensor  # [R, max_B] old logical index at each new position, -1 padded
    new_lens: torch.Tensor  # [R] = B
    n_freed: torch.Tensor  # [R] = Y - X leading logical blocks to free


def _check(k_cache, v_cache, block_table, seq_lens, keep):
    bs = check_cache(k_cache, v_cache)
    check_table(block_table, seq_lens, bs)
    R = block_table.shape[0]
    if keep.dtype != torch.bool or keep.dim() != 2 or keep.shape[0] != R:
        raise ValueError(
            f"keep must be a bool [{R}, N] mask over logical entries, got {tuple(keep.shape)} {keep.dtype}"
        )
    if keep.shape[1] > block_table.shape[1] * bs:
        raise ValueError(
            f"keep covers {keep.shape[1]} entries, more than the table's {block_table.shape[1] * bs} slots"
        )
    if R and int(seq_lens.max()) > keep.shape[1]:
        raise ValueError(f"keep has {keep.shape[1]} columns but a request holds {int(seq_lens.max())} entries")
    live = torch.arange(keep.shape[1], device=keep.device)[None, :] < seq_lens[:, None].to(keep.device)
    if bool((keep & ~live).any()):
        raise ValueError("keep marks entries at or beyond seq_lens (dead slots) as kept")
    return bs


def _padded_perm(rows, cols, values, R, width, device):
    perm = torch.full((R, width), -1, dtype=torch.long, device=device)
    perm[rows, cols] = values
    return perm


def compaction_plan(block_table, seq_lens, keep, block_size) -> CompactionPlan:
    """Algorithm 4's index arithmetic, vectorised over requests (``keep`` [R, N] with N >= every seq_len)."""
    # the window [start, end) can reach past n into the dead tail of the last block: pad keep to the table width
    keep = torch.nn.functional.pad(keep, (0, max(0, block_table.shape[1] * block_size - keep.shape[1])))
    device = keep.device
    n = seq_lens.long().to(device)
    B = keep.sum(1)
    Y = (n + block_size - 1) // block_size
    X = (B + block_size - 1) // block_size
    start = (Y - X) * block_size
    end = start + B
    idx = torch.arange(keep.shape[1], device=device)[None, :]
    window = (idx >= start[:, None]) & (idx < end[:, None])
    dst_r, dst_i = torch.nonzero(window & ~keep, as_tuple=True)  # row-major: sorted by (request, index)
    src_r, src_i = torch.nonzero(keep & ~window, as_tuple=True)
    if not torch.equal(src_r, dst_r):  # |src| = |dst| per request holds by construction
        raise AssertionError("Algorithm 4 invariant violated: |src| != |dst| for some request")
    width = int(B.max()) if B.numel() else 0
    win_r, win_i = torch.nonzero(window, as_tuple=True)
    perm = _padded_perm(win_r, win_i - start[win_r], win_i, keep.shape[0], width, device)
    perm[dst_r, dst_i - start[dst_r]] = src_i
    return CompactionPlan(
        src_slots=slot_index(block_table, src_r, src_i, block_size),
        dst_slots=slot_index(block_table, dst_r, dst_i, block_size),
        perm=perm,
        new_lens=B,
        n_freed=Y - X,
    )


def _shift_table(block_table, seq_lens, first, count, new_lens):
    """Free ``count[r]`` logical blocks starting at ``first[r]``; return them -1 padded, close the gap in place."""
    R, MB = block_table.shape
    device = block_table.device
    j = torch.arange(MB, device=device)[None, :]
    first = first.to(device)[:, None]
    count = count.to(device)[:, None]
    in_gap = (j >= first) & (j < first + count)
    width = int(count.max()) if R else 0
    freed = torch.full((R, width), -1, dtype=block_table.dtype, device=device)
    gr, gj = torch.nonzero(in_gap, as_tuple=True)
    freed[gr, gj - first[gr, 0]] = block_table[gr, gj]
    src = torch.where(j < first, j, j + count)
    shifted = torch.where(src < MB, block_table.gather(1, src.clamp(max=MB - 1)), torch.full_like(block_table, -1))
    block_table.copy_(shifted)
    seq_lens.copy_(new_lens.to(seq_lens.dtype))
    return freed


def compact_inplace(k_cache, v_cache, block_table, seq_lens, keep):
    """Algorithm 4 with the Triton slot-copy kernel; returns ``(freed_blocks, perm)``."""
    bs = _check(k_cache, v_cache, block_table, seq_lens, keep)
    plan = compaction_plan(block_table, seq_lens, keep, bs)
    k_rows = k_cache.view(-1, k_cache.shape[2] * k_cache.shape[3])
    v_rows = v_cache.view(-1, v_cache.shape[2] * v_cache.shape[3])
    copy_rows(k_rows, k_rows, v_rows, v_rows, plan.src_slots, plan.dst_slots)
    freed = _shift_table(block_table, seq_lens, torch.zeros_like(plan.n_freed), plan.n_freed, plan.new_lens)
    return freed, plan.perm


def compact_inplace_reference(k_cache, v_cache, block_table, seq_lens, keep):
    """Literal per-request Algorithm 4 in Python/torch (same contract as :func:`compact_inplace`)."""
    bs = _check(k_cache, v_cache, block_table, seq_lens, keep)
    R, MB = block_table.shape
    freed_rows, perms = [], []
    for r in range(R):
        n = int(seq_lens[r])
        kept = keep[r].nonzero().flatten().tolist()
        B = len(kept)
        Y, X = -(-n // bs), -(-B // bs)
        start, end = (Y - X) * bs, (Y - X) * bs + B
        kept_set = set(kept)
        dst = [i for i in range(start, end) if i not in kept_set]
        src = [i for i in kept if not start <= i < end]
        assert len(src) == len(dst) and not set(src) & set(dst)
        table = block_table[r].tolist()
        for s, d in zip(src, dst):
            sb, so, db, do = table[s // bs], s % bs, table[d // bs], d % bs
            k_cache[db, do] = k_cache[sb, so]
            v_cache[db, do] = v_cache[sb, so]
        perm = list(range(start, end))
        for s, d in zip(src, dst):
            perm[d - start] = s
        perms.append(perm)
        freed_rows.append(table[: Y - X])
        block_table[r] = torch.tensor(
            table[Y - X :] + [-1] * (Y - X), dtype=block_table.dtype, device=block_table.device
        )
        seq_lens[r] = B
    return _pad(freed_rows, block_table.dtype, block_table.device), _pad(perms, torch.long, keep.device)


def _pad(rows, dtype, device):
    width = max((len(x) for x in rows), default=0)
    return torch.tensor([x + [-1] * (width - len(x)) for x in rows], dtype=dtype, device=device).view(len(rows), width)


def compact_gather(k_cache, v_cache, block_table, seq_lens, keep):
    """Gather-based baseline: survivors (in order) -> workspace -> first ``X`` blocks; returns ``(freed, perm)``."""
    bs = _check(k_cache, v_cache, block_table, seq_lens, keep)
    ROW = k_cache.shape[2] * k_cache.shape[3]
    kr, ki = torch.nonzero(keep, as_tuple=True)
    B = keep.sum(1)
    base = torch.cumsum(B, 0) - B
    pos = torch.arange(kr.numel(), device=keep.device) - base[kr]  # new logical position of each survivor
    old_slots = slot_index(block_table, kr, ki, bs)
    new_slots = slot_index(block_table, kr, pos, bs)
    work_k = torch.empty((kr.numel(), ROW), dtype=k_cache.dtype, device=k_cache.device)
    work_v = torch.empty_like(work_k)
    k_rows, v_rows = k_cache.view(-1, ROW), v_cache.view(-1, ROW)
    ws = torch.arange(kr.numel(), device=keep.device)
    copy_rows(k_rows, work_k, v_rows, work_v, old_slots, ws)
    copy_rows(work_k, k_rows, work_v, v_rows, ws, new_slots)
    n = seq_lens.long().to(keep.device)
    Y, X = (n + bs - 1) // bs, (B + bs - 1) // bs
    freed = _shift_table(block_table, seq_lens, X, Y - X, B)
    perm = _padded_perm(kr, pos, ki, keep.shape[0], int(B.max()) if B.numel() else 0, keep.device)
    return freed, perm


def compact_gather_reference(k_cache, v_cache, block_table, seq_lens, keep):
    """Per-request torch reference of :func:`compact_gather`."""
    bs = _check(k_cache, v_cache, block_table, seq_lens, keep)
    freed_rows, perms = [], []
    for r in range(block_table.shape[0]):
        n = int(seq_lens[r])
        kept = keep[r].nonzero().flatten()
        B = kept.numel()
        Y, X = -(-n // bs), -(-B // bs)
        table = block_table[r].tolist()
        dev = k_cache.device
        old_b = torch.tensor([table[i // bs] for i in kept.tolist()], dtype=torch.long, device=dev)
        k_work, v_work = k_cache[old_b, kept % bs].clone(), v_cache[old_b, kept % bs].clone()
        new = torch.arange(B, device=dev)
        new_b = torch.tensor([table[i // bs] for i in new.tolist()], dtype=torch.long, device=dev)
        k_cache[new_b, new % bs] = k_work
        v_cache[new_b, new % bs] = v_work
        perms.append(kept.tolist())
        freed_rows.append(table[X:Y])
        block_table[r] = torch.tensor(
            table[:X] + table[Y:] + [-1] * (Y - X), dtype=block_table.dtype, device=block_table.device
        )
        seq_lens[r] = B
    return _pad(freed_rows, block_table.dtype, block_table.device), _pad(perms, torch.long, keep.device)
