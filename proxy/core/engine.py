"""The scheduling engine: the candidate pool that every policy decides from.

One engine serves the simulator and the live service (design.md: "There is
one engine").  It is driven by calls only — chronons in, probes and their
outcomes in, :data:`Event` values out — and implements the spec's
"Exact semantics of the named policies" (``shared/spec/workload-format.md``).

State is columnar so that one ``select`` over a million active CEIs stays in
tens of milliseconds:

* EI slots (``array.array`` columns, recycled) hold every EI the engine still
  needs: not yet started, active, or expired while a probe that may capture it
  is in flight.
* The *active table* (numpy columns) lists active EIs with two validity masks:
  ``alive`` (uncaptured, CEI not dead: spec step 3's candidates) and ``unc``
  (uncaptured: WIC's candidates, dead CEIs included).  Rows are invalidated in
  place and compacted lazily.
* CEI slots (numpy counters, recycled) keep what the values need
  incrementally: known uncaptured EIs (MRSF), captured EIs (the -np group),
  and M-EDF's sum as ``AB - t * N`` (``AB``: widths of not yet started EIs
  plus ``finish + 1`` of started ones; ``N``: how many have started).

What it deliberately does not do: read clocks, fetch anything, or know about
profiles beyond storing their names.  Resolved CEIs are forgotten except for
one ``id -> CeiState`` entry each (see :meth:`Engine.state`, :meth:`Engine.forget`).
"""

from __future__ import annotations

import enum
import heapq
import sys
from array import array
from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from proxy.core.policies import Candidates, Policy, get_policy

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
U64Array = npt.NDArray[np.uint64]


class CeiState(enum.Enum):
    """Where a CEI stands: still capturable, captured, or missed for good."""

    PENDING = "pending"
    CAPTURED = "captured"
    MISSED = "missed"


@dataclass(frozen=True, slots=True)
class EiCaptured:
    """EI number ``ordinal`` of ``cei_id`` (in the order given/revealed) was captured by a probe at ``chronon``."""

    cei_id: str
    ordinal: int
    resource: int
    chronon: int


@dataclass(frozen=True, slots=True)
class CeiCaptured:
    """Every EI of the sealed CEI is captured; ``chronon`` is when the engine learned it."""

    cei_id: str
    chronon: int


@dataclass(frozen=True, slots=True)
class CeiMissed:
    """A known EI of the CEI expired uncaptured (spec step 2); ``chronon`` is when the engine learned it."""

    cei_id: str
    chronon: int


Event = EiCaptured | CeiCaptured | CeiMissed

_PENDING, _CAPTURED, _MISSED = 0, 1, 2
_STATE_OF_CODE = (CeiState.PENDING, CeiState.CAPTURED, CeiState.MISSED)
_NO_POS = -1

#: :meth:`Engine.capture_share` follows about this many recent resolutions ...
SHARE_WINDOW = 1000
#: ... and says nothing before this many CEIs are resolved.
SHARE_MIN_RESOLVED = 50
_SHARE_DECAY = 1.0 - 1.0 / SHARE_WINDOW


def _id_keys(cei_id: str) -> tuple[int, int]:
    """Two big-endian words of the id's first 16 UTF-8 bytes, zero padded.

    UTF-8 byte order equals code point order, so these keys never contradict
    Python's string order; equal keys are settled by comparing the strings.
    """
    b = cei_id.encode("utf-8")[:16].ljust(16, b"\0")
    return int.from_bytes(b[:8], "big"), int.from_bytes(b[8:], "big")


_G = TypeVar("_G", bound=np.generic)


def _grown(a: npt.NDArray[_G], need: int) -> npt.NDArray[_G]:
    new = np.zeros(max(need, 2 * len(a), 16), dtype=a.dtype)
    new[: len(a)] = a
    return new


class Engine:
    """The candidate pool of one monitoring epoch, advanced chronon by chronon.

    Resource ids are ``0 .. resources-1`` and grow automatically when a larger
    id appears.  Call order within a chronon: :meth:`advance`, then CEI
    arrivals (:meth:`add_cei`, :meth:`reveal_ei`, :meth:`seal`), then
    :meth:`select` and probes.  ``history`` bounds how many chronons of
    successful probes are kept per resource for late reveals (``None``: all,
    exact for any reveal; otherwise at least ``history`` and the longest EI
    seen).

    Why one class of ~740 lines (issue 46 asks classes of one purpose, and
    under 600 lines where they can be): its one purpose is the CEI/EI state
    machine, kept as a structure of numpy arrays (slots, free lists, the
    active set, per-resource probe history) that every transition updates
    together. The policies read those arrays directly through
    :class:`Candidates` (millions of selections in the simulator); splitting
    the slot bookkeeping into another object would put an attribute hop or a
    call on each of those paths and spread each invariant (a slot is free,
    active or finished; a CEI's counters match its EIs) over two classes.
    The public half (``advance`` .. ``probe``) is above the private half
    (``_new_cei_slot`` ..), each private method one transition.
    """

    def __init__(self, resources: int = 0, *, history: int | None = None) -> None:
        if resources < 0:
            raise ValueError(f"resources must be >= 0, got {resources}")
        if history is not None and history < 0:
            raise ValueError(f"history must be >= 0 or None, got {history}")
        self._n = resources
        self._now = 0
        self._history_limit = history
        self._longest = 0
        self._events: list[Event] = []

        # EI slots.
        self._e_res = array("q")
        self._e_start = array("q")
        self._e_fin = array("q")
        self._e_cei = array("q")
        self._e_ord = array("q")
        self._e_capt = bytearray()
        self._e_pos = np.zeros(0, dtype=np.int64)  # row in the active table, or -1
        self._e_next = array("q")  # next EI slot of the same CEI, or -1
        self._e_free: list[int] = []

        # CEI slots.
        self._c_id: list[str] = []
        self._c_profile: list[str] = []
        self._c_state: list[int] = []
        self._c_sealed: list[bool] = []
        self._c_nei: list[int] = []  # EIs given so far (next ordinal)
        self._c_live: list[int] = []  # EI slots held
        # EI slots held by each CEI, as an intrusive singly linked list
        # (c_head -> e_next -> ... -> -1): a list object per CEI cost ~100 bytes.
        self._c_head = array("q")
        self._c_unc = np.zeros(0, dtype=np.int64)  # known uncaptured EIs
        self._c_capt = np.zeros(0, dtype=np.int64)  # known captured EIs
        self._c_fresh = np.zeros(0, dtype=np.int64)  # 1 while no known EI is captured (-np group)
        # M-EDF's value is ab - now * n: ab sums finish-start+1 over not yet
        # started uncaptured EIs plus finish+1 over started ones; n counts the latter.
        self._c_ab = np.zeros(0, dtype=np.int64)
        self._c_n = np.zeros(0, dtype=np.int64)
        self._c_k1 = np.zeros(0, dtype=np.uint64)
        self._c_k2 = np.zeros(0, dtype=np.uint64)
        self._c_free: list[int] = []
        self._slot_of: dict[str, int] = {}
        self._resolved: dict[str, CeiState] = {}
        # Plain ints: hashing an Enum member is a Python-level call on a hot path.
        self._n_pending = self._n_captured = self._n_missed = 0
        # Exponentially weighted counts of recent resolutions (capture_share).
        self._w_captured = self._w_resolved = 0.0

        # Active table.
        self._n_act = 0
        self._garbage = 0  # rows no longer active (captured or expired)
        self._dead_rows = 0  # active rows of dead CEIs (WIC's, not the others')
        self._a_ei = np.zeros(0, dtype=np.int64)
        self._a_res = np.zeros(0, dtype=np.int64)
        self._a_start = np.zeros(0, dtype=np.int64)
        self._a_fin = np.zeros(0, dtype=np.int64)
        self._a_cei = np.zeros(0, dtype=np.int64)
        self._a_alive = np.zeros(0, dtype=np.bool_)
        self._a_unc = np.zeros(0, dtype=np.bool_)

        # Time buckets: EIs to activate at start, to expire after finish.
        self._start_at: dict[int, list[int]] = {}
        self._start_heap: list[int] = []
        self._finish_at: dict[int, list[int]] = {}
        self._finish_heap: list[int] = []

        # Per resource: uncaptured started EIs (active or deferred), probes.
        # Uncaptured started EIs per resource; e_rpos is each EI's index in its
        # list, so removal is a swap with the last (sets cost ~8x the memory).
        self._on_res: dict[int, list[int]] = {}
        self._e_rpos = array("q")
        self._inflight: dict[int, list[int]] = {}
        self._deferred: dict[int, list[int]] = {}
        self._history: dict[int, list[int]] = {}
        self._pruned_at = 0

    # ------------------------------------------------------------------ basics

    @property
    def now(self) -> int:
        """The current chronon (0 before any advance)."""
        return self._now

    @property
    def resources(self) -> int:
        """n: resource ids are ``0 .. n-1``."""
        return self._n

    def state(self, cei_id: str) -> CeiState:
        """State of a CEI; ``KeyError`` for ids never added (or forgotten)."""
        c = self._slot_of.get(cei_id)
        if c is not None:
            return _STATE_OF_CODE[self._c_state[c]]
        st = self._resolved.get(cei_id)
        if st is not None:
            return st
        raise KeyError(cei_id)

    def forget(self, cei_id: str) -> None:
        """Drop the remembered state of a resolved CEI (the service archives it elsewhere).

        A resolved CEI whose EIs still occupy the engine (a missed CEI's EIs
        count for WIC until they end) stays visible until they are gone.
        """
        if cei_id in self._resolved:
            del self._resolved[cei_id]
            return
        if cei_id in self._slot_of:
            raise ValueError(f"CEI {cei_id!r} is still pending: only resolved CEIs can be forgotten")
        raise KeyError(cei_id)

    def counts(self) -> dict[CeiState, int]:
        """CEIs per state since the engine started (forgotten ones still counted)."""
        return {CeiState.PENDING: self._n_pending, CeiState.CAPTURED: self._n_captured,
                CeiState.MISSED: self._n_missed}

    def capture_share(self) -> float | None:
        """Captured share of the CEIs resolved lately, or ``None`` before :data:`SHARE_MIN_RESOLVED`.

        Each resolution (captured or missed) weighs ``1 - 1/SHARE_WINDOW``
        times the one after it, so the share follows the last ~1,000
        resolutions and a change of load shows within a few hundred.  What
        the proxy has captured is known online: policies may read it.
        """
        if self._n_captured + self._n_missed < SHARE_MIN_RESOLVED:
            return None
        return self._w_captured / self._w_resolved

    def drain_events(self) -> list[Event]:
        """Every event since the last drain, in the order they happened."""
        out, self._events = self._events, []
        return out

    @property
    def active_eis(self) -> int:
        """Active uncaptured EIs (WIC's candidates)."""
        return self._n_act - self._garbage

    @property
    def pending_ceis(self) -> int:
        return self._n_pending

    def memory_bytes(self) -> int:
        """A rough estimate of the engine's own memory (arrays and containers)."""
        total = sum(a.nbytes for a in (
            self._e_pos, self._c_unc, self._c_capt, self._c_fresh, self._c_ab, self._c_n,
            self._c_k1, self._c_k2, self._a_ei, self._a_res, self._a_start, self._a_fin,
            self._a_cei, self._a_alive, self._a_unc))
        total += sum(a.buffer_info()[1] * a.itemsize for a in (
            self._e_res, self._e_start, self._e_fin, self._e_cei, self._e_ord))
        total += len(self._e_capt)
        total += sys.getsizeof(self._slot_of) + sys.getsizeof(self._resolved)
        total += sum(a.buffer_info()[1] * a.itemsize for a in (self._c_head, self._e_next, self._e_rpos))
        total += sum(sys.getsizeof(s) for s in self._on_res.values())
        return total

    # ---------------------------------------------------------------- time

    def advance(self, t: int) -> None:
        """Move to chronon ``t`` (spec steps 1-2): start EIs, expire EIs, kill CEIs.

        Work is proportional to the EIs starting or ending, plus an occasional
        compaction of the active table.
        """
        if t < self._now:
            raise ValueError(f"cannot advance to chronon {t}: already at {self._now}")
        self._now = t
        start_heap, start_at = self._start_heap, self._start_at
        while start_heap and start_heap[0] <= t:
            for e in start_at.pop(heapq.heappop(start_heap)):
                self._activate(e)
        finish_heap, finish_at = self._finish_heap, self._finish_at
        while finish_heap and finish_heap[0] < t:
            for e in finish_at.pop(heapq.heappop(finish_heap)):
                self._expire(e)
        # Dead rows cost every select a gather; compact once they are a quarter.
        if self._garbage > 64 and 4 * self._garbage > self._n_act:
            self._compact()
        self._prune_history()

    # -------------------------------------------------------------- arrivals

    def add_cei(
        self,
        cei_id: str,
        profile: str,
        eis: Sequence[tuple[int, int, int]],
        *,
        sealed: bool = True,
    ) -> None:
        """Release a CEI at chronon ``now``; each EI is ``(resource, start, finish)``.

        EIs may start in the past (checked against earlier probes, spec step 7)
        or the future.  ``sealed=False``: more EIs may join via
        :meth:`reveal_ei`, and the CEI is never captured before :meth:`seal`.
        """
        if cei_id in self._slot_of or cei_id in self._resolved:
            raise ValueError(f"CEI {cei_id!r}: duplicate id")
        if sealed and not eis:
            raise ValueError(f"CEI {cei_id!r}: a sealed CEI needs at least one EI")
        for i, ei in enumerate(eis):
            self._check_ei(cei_id, i, *ei)
        # Sealed only once every EI is in: an early death must not recycle the slot.
        c = self._new_cei_slot(cei_id, profile, False)
        for r, s, f in eis:
            self._add_ei(c, r, s, f)
        self._c_sealed[c] = sealed
        self._check_captured(c)
        self._maybe_free_cei(c)

    def reveal_ei(self, cei_id: str, resource: int, start: int, finish: int, *, seal: bool = False) -> int:
        """Add an EI known from ``now`` to an unsealed CEI; returns its ordinal.

        A CEI already missed still takes the EI (WIC counts EIs of dead CEIs).
        """
        c = self._slot_of.get(cei_id)
        if c is None:
            if cei_id in self._resolved:
                raise ValueError(f"CEI {cei_id!r} is {self._resolved[cei_id].value} and sealed: no EI may join")
            raise KeyError(cei_id)
        if self._c_sealed[c]:
            raise ValueError(f"CEI {cei_id!r} is sealed: no EI may join")
        self._check_ei(cei_id, self._c_nei[c], resource, start, finish)
        ordinal = self._add_ei(c, resource, start, finish)
        if seal:
            self._c_sealed[c] = True
            self._check_captured(c)
            self._maybe_free_cei(c)
        return ordinal

    def seal(self, cei_id: str) -> None:
        """No more EIs will join; completes the CEI now if all its EIs are captured.

        Sealing a CEI that never received an EI (a trigger that never fired)
        resolves it as missed: there is nothing to notify, and every CEI still
        ends with one verdict.
        """
        c = self._slot_of.get(cei_id)
        if c is None:
            if cei_id in self._resolved:
                return  # resolved and sealed already
            raise KeyError(cei_id)
        if self._c_sealed[c]:
            return
        self._c_sealed[c] = True
        if self._c_nei[c] == 0:
            self._kill(c)
        self._check_captured(c)
        self._maybe_free_cei(c)

    # --------------------------------------------------------------- select

    def select(
        self,
        budget: int,
        policy: str | Policy,
        *,
        exclude: Collection[int] = (),
    ) -> list[int]:
        """At most ``budget`` distinct resources to probe at ``now``, best first.

        Never returns a resource in ``exclude`` or one with a probe in flight.
        Does not change capture state.
        """
        if budget < 0:
            raise ValueError(f"budget must be >= 0, got {budget}")
        pol = get_policy(policy) if isinstance(policy, str) else policy
        blocked: Collection[int] = set(exclude) if exclude else frozenset()
        if self._inflight:
            blocked = set(blocked) | self._inflight.keys()
        chosen = pol.select(self, budget, blocked)
        # The contract holds whatever a (possibly third-party) policy returns.
        if len(chosen) > budget or len(set(chosen)) != len(chosen) or (blocked and any(r in blocked for r in chosen)):
            chosen = [r for r in dict.fromkeys(chosen) if r not in blocked][:budget]
        return chosen

    # PoolView ----------------------------------------------------------

    def cei_candidates(self) -> Candidates:
        return self._candidates(self._a_alive)

    def wic_candidates(self) -> Candidates:
        return self._candidates(self._a_unc)

    def _candidates(self, mask: BoolArray) -> Candidates:
        n = self._n_act
        # Active EIs finish in [now, now + longest - 1]: a bound that spares a pass.
        horizon = self._now + max(self._longest - 1, 0)
        if n == 0 or (self._garbage == 0 and (mask is self._a_unc or self._dead_rows == 0)):
            return Candidates(self._now, self._a_res[:n], self._a_start[:n], self._a_fin[:n],
                              self._a_cei[:n], horizon)
        idx = np.flatnonzero(mask[:n])
        if len(idx) == n:
            return Candidates(self._now, self._a_res[:n], self._a_start[:n], self._a_fin[:n],
                              self._a_cei[:n], horizon)
        return Candidates(self._now, self._a_res[idx], self._a_start[idx], self._a_fin[idx],
                          self._a_cei[idx], horizon)

    def remaining(self, cei: IntArray) -> IntArray:
        return self._c_unc[cei]

    def captured_count(self, cei: IntArray) -> IntArray:
        return self._c_capt[cei]

    def not_started(self, cei: IntArray) -> IntArray:
        return self._c_fresh[cei]

    def medf_value(self, cei: IntArray) -> IntArray:
        slots = len(self._c_id)
        if slots <= len(cei):
            # Fewer CEIs than candidates: compute per CEI, then one gather.
            per_cei = self._c_n[:slots] * -self._now
            per_cei += self._c_ab[:slots]
            return per_cei[cei]
        value = self._c_n[cei]
        value *= -self._now
        value += self._c_ab[cei]
        return value

    def id_keys(self, cei: IntArray) -> tuple[U64Array, U64Array]:
        return self._c_k1[cei], self._c_k2[cei]

    def id_head(self, cei: IntArray) -> U64Array:
        return self._c_k1[cei]

    def ids(self, cei: Sequence[int]) -> list[str]:
        c_id = self._c_id
        return [c_id[c] for c in cei]

    # --------------------------------------------------------------- probes

    def begin_probe(self, resource: int) -> None:
        """A probe of ``resource`` started at chronon ``now`` and is in flight."""
        if resource < 0:
            raise ValueError(f"resource must be >= 0, got {resource}")
        if resource >= self._n:
            self._n = resource + 1
        self._inflight.setdefault(resource, []).append(self._now)

    def complete_probe(self, resource: int, started: int, *, success: bool) -> list[Event]:
        """The probe of ``resource`` begun at ``started`` finished; returns the events it caused.

        On success it captures every EI on ``resource`` with
        ``start <= started <= finish``, known or not, even if it has expired
        since (the probe counted for ``started``).  EIs whose verdict waited
        for this probe and stay uncaptured make their CEI missed now.
        """
        flights = self._inflight.get(resource)
        if not flights or started not in flights:
            raise ValueError(f"no probe of resource {resource} started at chronon {started} is in flight")
        flights.remove(started)
        if not flights:
            del self._inflight[resource]
        mark = len(self._events)
        if success:
            self._record_success(resource, started)
            self._capture_on(resource, started)
        deferred = self._deferred.get(resource)
        if deferred:
            keep: list[int] = []
            for e in deferred:
                if self._e_capt[e]:
                    self._free_ei(e)
                elif self._covered(resource, self._e_start[e], self._e_fin[e]):
                    keep.append(e)
                else:
                    self._finalize_uncaptured(e)
            if keep:
                self._deferred[resource] = keep
            else:
                del self._deferred[resource]
        return self._events[mark:]

    def probe(self, resources: Iterable[int]) -> list[Event]:
        """Probe each resource at ``now`` and succeed at once: the simulator's path."""
        mark = len(self._events)
        now = self._now
        for r in resources:
            if r < 0:
                raise ValueError(f"resource must be >= 0, got {r}")
            if r >= self._n:
                self._n = r + 1
            self._record_success(r, now)
            self._capture_on(r, now)
        return self._events[mark:]

    # ------------------------------------------------------------ internals

    def _check_ei(self, cei_id: str, i: int, resource: int, start: int, finish: int) -> None:
        if resource < 0:
            raise ValueError(f"CEI {cei_id!r}, EI #{i}: resource {resource} < 0")
        if start < 0 or start > finish:
            raise ValueError(f"CEI {cei_id!r}, EI #{i}: bad window start={start} finish={finish}")

    def _new_cei_slot(self, cei_id: str, profile: str, sealed: bool) -> int:
        k1, k2 = _id_keys(cei_id)
        if self._c_free:
            c = self._c_free.pop()
            self._c_id[c] = cei_id
            self._c_profile[c] = profile
            self._c_state[c] = _PENDING
            self._c_sealed[c] = sealed
            self._c_nei[c] = 0
            self._c_live[c] = 0
            self._c_head[c] = -1
        else:
            c = len(self._c_id)
            self._c_id.append(cei_id)
            self._c_profile.append(profile)
            self._c_state.append(_PENDING)
            self._c_sealed.append(sealed)
            self._c_nei.append(0)
            self._c_live.append(0)
            self._c_head.append(-1)
            if c >= len(self._c_unc):
                self._c_unc = _grown(self._c_unc, c + 1)
                self._c_capt = _grown(self._c_capt, c + 1)
                self._c_fresh = _grown(self._c_fresh, c + 1)
                self._c_ab = _grown(self._c_ab, c + 1)
                self._c_n = _grown(self._c_n, c + 1)
                self._c_k1 = _grown(self._c_k1, c + 1)
                self._c_k2 = _grown(self._c_k2, c + 1)
        self._c_unc[c] = 0
        self._c_capt[c] = 0
        self._c_fresh[c] = 1
        self._c_ab[c] = 0
        self._c_n[c] = 0
        self._c_k1[c] = k1
        self._c_k2[c] = k2
        self._slot_of[cei_id] = c
        self._n_pending += 1
        return c

    def _new_ei_slot(self, c: int, r: int, s: int, f: int, ordinal: int) -> int:
        if self._e_free:
            e = self._e_free.pop()
            self._e_res[e] = r
            self._e_start[e] = s
            self._e_fin[e] = f
            self._e_cei[e] = c
            self._e_ord[e] = ordinal
            self._e_capt[e] = 0
            self._e_pos[e] = _NO_POS
        else:
            e = len(self._e_res)
            self._e_res.append(r)
            self._e_start.append(s)
            self._e_fin.append(f)
            self._e_cei.append(c)
            self._e_ord.append(ordinal)
            self._e_capt.append(0)
            self._e_next.append(-1)
            self._e_rpos.append(-1)
            if e >= len(self._e_pos):
                self._e_pos = _grown(self._e_pos, e + 1)
            self._e_pos[e] = _NO_POS
        self._c_live[c] += 1
        self._e_next[e] = self._c_head[c]
        self._c_head[c] = e
        return e

    def _add_ei(self, c: int, r: int, s: int, f: int) -> int:
        """Register one EI known from now; returns its ordinal."""
        if r >= self._n:
            self._n = r + 1
        if f - s + 1 > self._longest:
            self._longest = f - s + 1
        ordinal = self._c_nei[c]
        self._c_nei[c] = ordinal + 1
        now = self._now
        if s > now:
            e = self._new_ei_slot(c, r, s, f, ordinal)
            self._c_unc[c] += 1
            self._c_ab[c] += f - s + 1
            bucket = self._start_at.get(s)
            if bucket is None:
                self._start_at[s] = [e]
                heapq.heappush(self._start_heap, s)
            else:
                bucket.append(e)
            return ordinal
        # Spec step 7: an earlier probe of r within the window captured it, known or not.
        hit = self._probe_in(r, s, min(f, now))
        if hit is not None:
            self._c_capt[c] += 1
            self._c_fresh[c] = 0
            self._events.append(EiCaptured(self._c_id[c], ordinal, r, hit))
            return ordinal
        self._c_unc[c] += 1
        if f >= now:
            e = self._new_ei_slot(c, r, s, f, ordinal)
            self._c_ab[c] += f - s + 1  # _activate turns it into finish + 1
            self._activate(e)
        elif self._covered(r, s, f):
            # Expired, but an in-flight probe may still capture it: defer the verdict.
            e = self._new_ei_slot(c, r, s, f, ordinal)
            self._on_res_add(r, e)
            self._deferred.setdefault(r, []).append(e)
        else:
            self._kill(c)
        return ordinal

    def _activate(self, e: int) -> None:
        c = self._e_cei[e]
        r = self._e_res[e]
        s = self._e_start[e]
        f = self._e_fin[e]
        self._c_ab[c] += s  # (finish + 1) - (finish - start + 1)
        self._c_n[c] += 1
        i = self._n_act
        if i >= len(self._a_res):
            self._grow_active(i + 1)
        self._a_ei[i] = e
        self._a_res[i] = r
        self._a_start[i] = s
        self._a_fin[i] = f
        self._a_cei[i] = c
        alive = self._c_state[c] == _PENDING
        self._a_alive[i] = alive
        if not alive:
            self._dead_rows += 1
        self._a_unc[i] = True
        self._n_act = i + 1
        self._e_pos[e] = i
        self._on_res_add(r, e)
        bucket = self._finish_at.get(f)
        if bucket is None:
            self._finish_at[f] = [e]
            heapq.heappush(self._finish_heap, f)
        else:
            bucket.append(e)

    def _grow_active(self, need: int) -> None:
        self._a_ei = _grown(self._a_ei, need)
        self._a_res = _grown(self._a_res, need)
        self._a_start = _grown(self._a_start, need)
        self._a_fin = _grown(self._a_fin, need)
        self._a_cei = _grown(self._a_cei, need)
        self._a_alive = _grown(self._a_alive, need)
        self._a_unc = _grown(self._a_unc, need)

    def _deactivate(self, e: int) -> None:
        """Remove an active EI from the active table and from M-EDF's started sums."""
        i = int(self._e_pos[e])
        if not self._a_alive[i]:
            self._dead_rows -= 1
        self._a_alive[i] = False
        self._a_unc[i] = False
        self._e_pos[e] = _NO_POS
        self._garbage += 1
        c = self._e_cei[e]
        self._c_ab[c] -= self._e_fin[e] + 1
        self._c_n[c] -= 1

    def _expire(self, e: int) -> None:
        """``finish < now``: spec step 2's death, unless an in-flight probe may still capture it."""
        if self._e_capt[e]:
            self._free_ei(e)
            return
        self._deactivate(e)
        r = self._e_res[e]
        if self._covered(r, self._e_start[e], self._e_fin[e]):
            self._deferred.setdefault(r, []).append(e)
        else:
            self._finalize_uncaptured(e)

    def _finalize_uncaptured(self, e: int) -> None:
        self._on_res_remove(self._e_res[e], e)
        self._kill(self._e_cei[e])
        self._free_ei(e)

    def _kill(self, c: int) -> None:
        if self._c_state[c] != _PENDING:
            return
        self._c_state[c] = _MISSED
        cei_id = self._c_id[c]
        self._resolved[cei_id] = CeiState.MISSED
        self._n_pending -= 1
        self._n_missed += 1
        self._w_resolved = self._w_resolved * _SHARE_DECAY + 1.0
        self._w_captured *= _SHARE_DECAY
        self._events.append(CeiMissed(cei_id, self._now))
        # Spec step 3: its EIs leave the candidates (but stay WIC's).
        e = self._c_head[c]
        while e >= 0:
            i = int(self._e_pos[e])
            if i >= 0 and self._a_alive[i]:
                self._a_alive[i] = False
                self._dead_rows += 1
            e = self._e_next[e]
        self._maybe_free_cei(c)

    def _free_ei(self, e: int) -> None:
        c = self._e_cei[e]
        self._c_live[c] -= 1
        # Unlink e: CEIs hold a handful of EIs, so walking the list is cheap.
        nxt = self._e_next[e]
        if self._c_head[c] == e:
            self._c_head[c] = nxt
        else:
            p = self._c_head[c]
            while self._e_next[p] != e:
                p = self._e_next[p]
            self._e_next[p] = nxt
        self._e_free.append(e)
        self._maybe_free_cei(c)

    def _maybe_free_cei(self, c: int) -> None:
        cei_id = self._c_id[c]
        if (self._c_state[c] != _PENDING and self._c_sealed[c] and self._c_live[c] == 0
                and self._slot_of.get(cei_id) == c):  # not freed already
            del self._slot_of[cei_id]
            self._c_id[c] = ""
            self._c_profile[c] = ""
            self._c_free.append(c)

    def _check_captured(self, c: int) -> None:
        if self._c_state[c] == _PENDING and self._c_sealed[c] and self._c_unc[c] == 0:
            self._c_state[c] = _CAPTURED
            cei_id = self._c_id[c]
            self._resolved[cei_id] = CeiState.CAPTURED
            self._n_pending -= 1
            self._n_captured += 1
            self._w_resolved = self._w_resolved * _SHARE_DECAY + 1.0
            self._w_captured = self._w_captured * _SHARE_DECAY + 1.0
            self._events.append(CeiCaptured(cei_id, self._now))
            self._maybe_free_cei(c)

    def _capture_on(self, r: int, p: int) -> None:
        """Spec step 7: a probe of ``r`` counted at chronon ``p`` captures every EI it covers."""
        on = self._on_res.get(r)
        if not on:
            return
        e_start, e_fin = self._e_start, self._e_fin
        hits = sorted(e for e in on if e_start[e] <= p <= e_fin[e])
        if not hits:
            return
        for e in hits:
            self._on_res_remove(r, e)
        touched: list[int] = []
        for e in hits:
            self._e_capt[e] = 1
            c = self._e_cei[e]
            if self._e_pos[e] >= 0:
                self._deactivate(e)
            self._c_unc[c] -= 1
            self._c_capt[c] += 1
            self._c_fresh[c] = 0
            self._events.append(EiCaptured(self._c_id[c], self._e_ord[e], r, p))
            touched.append(c)
        for c in touched:
            self._check_captured(c)

    def _on_res_add(self, r: int, e: int) -> None:
        on = self._on_res.get(r)
        if on is None:
            on = self._on_res[r] = []
        self._e_rpos[e] = len(on)
        on.append(e)

    def _on_res_remove(self, r: int, e: int) -> None:
        on = self._on_res[r]
        i = self._e_rpos[e]
        last = on.pop()
        if last != e:
            on[i] = last
            self._e_rpos[last] = i
        self._e_rpos[e] = -1
        if not on:
            del self._on_res[r]

    def _record_success(self, r: int, p: int) -> None:
        h = self._history.get(r)
        if h is None:
            self._history[r] = [p]
        elif h[-1] <= p:
            h.append(p)
        else:
            insort(h, p)

    def _probe_in(self, r: int, lo: int, hi: int) -> int | None:
        """The earliest successful probe of ``r`` counted in ``[lo, hi]``, if any."""
        h = self._history.get(r)
        if not h or lo > hi:
            return None
        i = bisect_left(h, lo)
        if i < len(h) and h[i] <= hi:
            return h[i]
        return None

    def _covered(self, r: int, s: int, f: int) -> bool:
        """Whether a probe of ``r`` now in flight counts for a chronon in ``[s, f]``."""
        flights = self._inflight.get(r)
        if not flights:
            return False
        return any(s <= p <= f for p in flights)

    def _prune_history(self) -> None:
        if self._history_limit is None:
            return
        keep = max(self._history_limit, self._longest)
        # Sweep once per `keep` chronons so the cost stays amortised per probe.
        if self._now - self._pruned_at <= keep:
            return
        self._pruned_at = self._now
        horizon = self._now - keep
        for r in list(self._history):
            h = self._history[r]
            if h[0] < horizon:
                del h[: bisect_left(h, horizon)]
                if not h:
                    del self._history[r]

    def _compact(self) -> None:
        n = self._n_act
        keep = np.flatnonzero(self._a_unc[:n])
        k = len(keep)
        for name in ("_a_ei", "_a_res", "_a_start", "_a_fin", "_a_cei", "_a_alive", "_a_unc"):
            col = getattr(self, name)
            col[:k] = col[keep]
        self._e_pos[self._a_ei[:k]] = np.arange(k, dtype=np.int64)
        self._n_act = k
        self._garbage = 0
