"""MovieTweetings 100K (MIT; see ../shared/data/movietweetings-100k/SOURCE.md): time-ordered per-user histories.

``ratings.dat`` (``user::movie::rating::unix_time``, sorted by user and movie, *not* by time) and ``movies.dat``
(``movie::Title (Year)::Genre|Genre``) are checked against the sha256 and the statistics that SOURCE.md states
before anything is parsed into sequences. Every rating is an interaction (implicit feedback; the 0-10 score is
kept but not used as a label). Items are re-indexed ``1..N`` in movie-id order; index 0 is padding.

Splits (the same for every seed and arm; they never depend on a training seed):

* :func:`leave_last_out` — per user, the last interaction is the test target and the one before it the validation
  target; users with fewer than ``min_eval_len`` interactions are *short*: never evaluated, their whole sequence
  is training data (counted and reported, not silently dropped).
* :func:`time_split` — two global cut times at quantiles of all timestamps; every event after the test cut by a
  user with at least one earlier event is a test request whose history is all of that user's earlier events
  (the replay period of the serving study).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import numpy as np

from agentpost.data.registry import data_file

NAME = "movietweetings-100k"
#: Statistics from SOURCE.md ("Statistics"), re-checked on load.
N_RATINGS, N_USERS, N_MOVIES = 100_000, 16_554, 10_506


class DataIntegrityError(ValueError):
    """A MovieTweetings file differs from what SOURCE.md describes."""


def _verified(filename: str) -> bytes:
    """The file's bytes; ``data_file`` has checked its size and sha256 against SOURCE.md (the data registry)."""
    return data_file(NAME, filename).read_bytes()


@dataclass(frozen=True)
class Movie:
    movie_id: int
    title: str  # "Title (Year)" as in movies.dat
    genres: tuple[str, ...]

    def text(self) -> str:
        """The text whose sentence embedding is the item's semantic view (title, year and genres)."""
        genres = ", ".join(self.genres) if self.genres else "unknown genre"
        return f"{self.title}. Genres: {genres}."


@functools.lru_cache(maxsize=None)
def load_movies() -> tuple[Movie, ...]:
    """All movies in file order (checksum-verified)."""
    out = []
    for n, line in enumerate(_verified("movies.dat").decode("utf-8").splitlines(), 1):
        parts = line.split("::")
        if len(parts) != 3:
            raise DataIntegrityError(f"movies.dat line {n}: expected 3 '::' fields, got {len(parts)}")
        out.append(Movie(int(parts[0]), parts[1], tuple(g for g in parts[2].split("|") if g)))
    if len(out) != N_MOVIES or len({m.movie_id for m in out}) != N_MOVIES:
        raise DataIntegrityError(f"movies.dat: {len(out)} rows; SOURCE.md says {N_MOVIES} distinct movies")
    return tuple(out)


@functools.lru_cache(maxsize=None)
def load_ratings() -> np.ndarray:
    """Structured array (user, movie, rating, ts) in file order (checksum- and statistics-verified)."""
    rows = np.loadtxt(_verified("ratings.dat").decode("utf-8").replace("::", " ").splitlines(), dtype=np.int64)
    if rows.shape != (N_RATINGS, 4):
        raise DataIntegrityError(f"ratings.dat: shape {rows.shape}; SOURCE.md says {N_RATINGS} rows of 4 fields")
    if len(np.unique(rows[:, 0])) != N_USERS:
        raise DataIntegrityError(f"ratings.dat: {len(np.unique(rows[:, 0]))} users; SOURCE.md says {N_USERS}")
    known = {m.movie_id for m in load_movies()}
    if not set(np.unique(rows[:, 1]).tolist()) <= known:
        raise DataIntegrityError("ratings.dat rates movies missing from movies.dat")
    out = np.zeros(N_RATINGS, dtype=[("user", np.int64), ("movie", np.int64), ("rating", np.int64), ("ts", np.int64)])
    out["user"], out["movie"], out["rating"], out["ts"] = rows.T
    return out


@dataclass
class Interactions:
    """Per-user time-ordered item sequences over a re-indexed catalogue (item 0 = padding)."""

    users: np.ndarray  # original user ids, ascending
    items: list[np.ndarray]  # per user: item indices (1..n_items), oldest -> newest
    times: list[np.ndarray]  # per user: unix timestamps, non-decreasing
    movies: tuple[Movie, ...]  # movies[i - 1] is item i
    note: str = ""

    @property
    def n_items(self) -> int:
        return len(self.movies)

    @property
    def n_interactions(self) -> int:
        return int(sum(len(s) for s in self.items))

    def texts(self) -> list[str]:
        """Item texts in item order (index i - 1 for item i)."""
        return [m.text() for m in self.movies]


def load_interactions(*, user_fraction: float = 1.0, salt: str = "muser-users-v1") -> Interactions:
    """All users' histories sorted by (timestamp, movie id) — ties broken by id, deterministically.

    ``user_fraction`` < 1 keeps a deterministic subsample: users whose sha256(salt + user id) falls in the lowest
    ``user_fraction`` of the hash range (independent of any seed). The catalogue is every movie the kept users
    rated (all 10,506 on the full set, where every movie is rated), in movie-id order.
    """
    if not 0 < user_fraction <= 1:
        raise ValueError(f"user_fraction must be in (0, 1], got {user_fraction}")
    r = load_ratings()
    order = np.lexsort((r["movie"], r["ts"], r["user"]))
    r = r[order]
    users, starts = np.unique(r["user"], return_index=True)
    bounds = list(starts) + [len(r)]
    keep = [u for u in range(len(users)) if _hash_unit(salt, int(users[u])) < user_fraction]
    kept_rows = np.concatenate([np.arange(bounds[u], bounds[u + 1]) for u in keep])
    rated = set(np.unique(r["movie"][kept_rows]).tolist())
    movies = tuple(sorted((m for m in load_movies() if m.movie_id in rated), key=lambda m: m.movie_id))
    index = {m.movie_id: i + 1 for i, m in enumerate(movies)}
    item_col = np.fromiter((index.get(m, 0) for m in r["movie"]), dtype=np.int64, count=len(r))
    note = "" if user_fraction == 1 else f"deterministic {user_fraction:.0%} user subsample (sha256 of '{salt}' + id)"
    return Interactions(
        users=users[keep],
        items=[item_col[bounds[u] : bounds[u + 1]] for u in keep],
        times=[r["ts"][bounds[u] : bounds[u + 1]] for u in keep],
        movies=movies,
        note=note,
    )


def _hash_unit(salt: str, uid: int) -> float:
    return int(hashlib.sha256(f"{salt}{uid}".encode()).hexdigest()[:12], 16) / 16**12


@dataclass
class EvalCase:
    """Predict ``target`` from ``history`` (oldest -> newest); ``user`` indexes :attr:`Interactions.items`."""

    user: np.ndarray
    history: list[np.ndarray]
    target: np.ndarray
    time: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __len__(self) -> int:
        return len(self.target)


@dataclass
class Split:
    """Training sequences (per user, possibly empty) and the validation / test cases of one split rule."""

    train: list[np.ndarray]
    train_times: list[np.ndarray]
    validation: EvalCase
    test: EvalCase
    stats: dict


def leave_last_out(data: Interactions, *, min_eval_len: int = 5) -> Split:
    """Last item = test, second-last = validation, the rest = training, for users with >= ``min_eval_len``
    interactions (``min_eval_len`` >= 3 so that training keeps at least one item). Shorter users are training-only.
    """
    if min_eval_len < 3:
        raise ValueError(f"min_eval_len must be >= 3 (one training item, one validation, one test), got {min_eval_len}")
    train, train_t, ev = [], [], []
    for u, (s, t) in enumerate(zip(data.items, data.times)):
        if len(s) >= min_eval_len:
            train.append(s[:-2])
            train_t.append(t[:-2])
            ev.append(u)
        else:
            train.append(s)
            train_t.append(t)
    ev = np.asarray(ev, dtype=np.int64)  # type: ignore[assignment]  # the users, now as an array
    val = EvalCase(
        ev,  # type: ignore[arg-type]
        [data.items[u][:-2] for u in ev],
        np.array([data.items[u][-2] for u in ev]),
        np.array([data.times[u][-2] for u in ev]),
    )
    test = EvalCase(
        ev,  # type: ignore[arg-type]
        [data.items[u][:-1] for u in ev],
        np.array([data.items[u][-1] for u in ev]),
        np.array([data.times[u][-1] for u in ev]),
    )
    short = len(data.items) - len(ev)
    stats = {
        "users": len(data.items),
        "eval_users": len(ev),
        "short_users_train_only": short,
        "short_users_interactions": int(
            sum(len(data.items[u]) for u in range(len(data.items)) if len(data.items[u]) < min_eval_len)
        ),
        "train_interactions": int(sum(len(s) for s in train)),
        "min_eval_len": min_eval_len,
    }
    return Split(train, train_t, val, test, stats)


def time_split(data: Interactions, *, val_quantile: float = 0.8, test_quantile: float = 0.9) -> Split:
    """Global cut times at the ``val_quantile`` and ``test_quantile`` quantiles of all timestamps.

    Training: events before the validation cut. Validation / test: every event in ``[val_cut, test_cut)`` /
    ``[test_cut, end]`` by a user with at least one earlier event (history = all of that user's earlier events,
    including earlier events of the same period — the online replay). A user whose first event falls in an
    evaluation period contributes no request for that first event (cold user; counted in ``stats``).
    """
    if not 0 < val_quantile < test_quantile < 1:
        raise ValueError(f"need 0 < val_quantile < test_quantile < 1, got {val_quantile}, {test_quantile}")
    all_t = np.concatenate(data.times)
    val_cut, test_cut = (int(np.quantile(all_t, q)) for q in (val_quantile, test_quantile))
    cases = {"validation": ([], [], [], []), "test": ([], [], [], [])}  # type: ignore[var-annotated]
    cold = {"validation": 0, "test": 0}
    train, train_t = [], []
    for u, (s, t) in enumerate(zip(data.items, data.times)):
        n_train = int(np.searchsorted(t, val_cut, side="left"))
        train.append(s[:n_train])
        train_t.append(t[:n_train])
        for j in range(n_train, len(s)):
            period = "validation" if t[j] < test_cut else "test"
            if j == 0:
                cold[period] += 1
                continue
            users, hist, tgt, tm = cases[period]
            users.append(u)
            hist.append(s[:j])
            tgt.append(s[j])
            tm.append(t[j])
    mk = {
        k: EvalCase(
            np.asarray(v[0], dtype=np.int64), v[1], np.asarray(v[2], dtype=np.int64), np.asarray(v[3], dtype=np.int64)
        )
        for k, v in cases.items()
    }
    stats = {
        "val_cut": val_cut,
        "test_cut": test_cut,
        "train_interactions": int(sum(len(s) for s in train)),
        "validation_requests": len(mk["validation"]),
        "test_requests": len(mk["test"]),
        "cold_events_validation": cold["validation"],
        "cold_events_test": cold["test"],
    }
    return Split(train, train_t, mk["validation"], mk["test"], stats)
