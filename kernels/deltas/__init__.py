"""DeltaS: the chunked gated-delta forward that also returns the per-chunk state drift (spec `papers/deltas.md`).

- :func:`chunk_gated_delta_drift` ``(q, k, v, g, beta, initial_state=None, *, scale, chunk_size, with_drift,
  drift_norm, eps) -> (o, final_state, drift)`` and :func:`chunk_gated_delta_drift_reference` (same signature).
"""

from .chunk_delta import chunk_gated_delta_drift, chunk_gated_delta_drift_reference

__all__ = ["chunk_gated_delta_drift", "chunk_gated_delta_drift_reference"]
