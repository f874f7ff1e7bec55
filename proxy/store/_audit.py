"""``proxy db check``: the invariants a crash or an outage must never break, audited in SQL.

Each invariant is one query that returns the rows breaking it, so the report
names every violation (a CEI id, an EI, a chronon), not just a count. It reads
only; it fixes nothing (a violation is a bug to report, and the rows are its
evidence).
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import and_, exists, func, or_, select

from proxy.store._base import StoreBase
from proxy.store._models import CaptureRow, CeiRow, ChrononMetricsRow, EiRow, ProbeRow

__all__ = ["INVARIANTS", "AuditReport", "Violation"]

#: The invariants by name, with what each one says (the report's headings).
INVARIANTS: dict[str, str] = {
    "captured_cei_all_eis_captured": "a captured CEI has every EI captured",
    "captured_ei_has_capture_and_probe": "a captured EI has its capture record and its probe",
    "missed_cei_has_uncaptured_ei": "a missed CEI has an EI that was not captured",
    "chronon_within_budget": "no chronon has more probes than its budget",
    "no_pending_cei_past_its_windows": "no CEI is pending after all its windows passed",
}


@dataclass(frozen=True, slots=True)
class Violation:
    """One row breaking ``invariant``, described for a person."""

    invariant: str
    detail: str


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What :meth:`Audit.audit` looked at and what it found."""

    ceis: int
    eis: int
    chronons: int
    last_chronon: int | None
    violations: tuple[Violation, ...]


class Audit(StoreBase):
    """The database's invariants (:data:`INVARIANTS`)."""

    async def audit(self, *, grace: int = 40, limit: int = 1000) -> AuditReport:
        """Check every invariant; at most ``limit`` violations of each are listed.

        ``grace``: chronons after a CEI's last window before a pending CEI counts as
        stuck (the service seals an open trigger CEI 30 chronons after its trigger
        window, and its writes trail its decisions), measured from the last chronon
        the loop recorded.
        """
        out: list[Violation] = []
        async with self._tx() as conn:
            n_ceis = (await conn.execute(select(func.count()).select_from(CeiRow))).scalar_one()
            n_eis = (await conn.execute(select(func.count()).select_from(EiRow))).scalar_one()
            n_chronons, last = (await conn.execute(
                select(func.count(), func.max(ChrononMetricsRow.chronon)))).one()

            not_captured = and_(EiRow.cei_id == CeiRow.id, EiRow.state != "captured")
            rows = await conn.execute(
                select(CeiRow.id, EiRow.ordinal, EiRow.state)
                .join(EiRow, not_captured)
                .where(CeiRow.state == "captured")
                .order_by(CeiRow.id, EiRow.ordinal).limit(limit))
            out += [Violation("captured_cei_all_eis_captured",
                              f"CEI {cid!r} is captured but its EI #{ordinal} is {state}")
                    for cid, ordinal, state in rows]

            has_capture = exists().where(CaptureRow.ei_id == EiRow.id)
            eis = await conn.execute(
                select(EiRow.cei_id, EiRow.ordinal, EiRow.id, EiRow.captured_probe_id,
                       has_capture.label("recorded"))
                .where(EiRow.state == "captured",
                       or_(EiRow.captured_probe_id.is_(None), ~has_capture))
                .order_by(EiRow.cei_id, EiRow.ordinal).limit(limit))
            for cid, ordinal, ei_id, probe_id, recorded in eis:
                missing = [what for what, gone in (("capture record", not recorded),
                                                   ("probe", probe_id is None)) if gone]
                out.append(Violation(
                    "captured_ei_has_capture_and_probe",
                    f"EI #{ordinal} (id {ei_id}) of CEI {cid!r} is captured without its "
                    + " and ".join(missing)))

            uncaptured = exists().where(not_captured)
            missed = await conn.execute(
                select(CeiRow.id).where(CeiRow.state == "missed", ~uncaptured)
                .order_by(CeiRow.id).limit(limit))
            out += [Violation("missed_cei_has_uncaptured_ei",
                              f"CEI {cid!r} is missed but every EI of it was captured")
                    for (cid,) in missed]

            used = (select(ProbeRow.chronon, func.count().label("probes"))
                    .where(ProbeRow.chronon.is_not(None))
                    .group_by(ProbeRow.chronon).subquery())
            over = await conn.execute(
                select(used.c.chronon, used.c.probes, ChrononMetricsRow.budget)
                .join(ChrononMetricsRow, ChrononMetricsRow.chronon == used.c.chronon)
                .where(used.c.probes > ChrononMetricsRow.budget)
                .order_by(used.c.chronon).limit(limit))
            out += [Violation("chronon_within_budget",
                              f"chronon {t} has {probes} probes over its budget of {budget}")
                    for t, probes, budget in over]

            if last is not None:
                last_finish = (select(EiRow.cei_id, func.max(EiRow.finish).label("finish"))
                               .group_by(EiRow.cei_id).subquery())
                stuck = await conn.execute(
                    select(CeiRow.id, last_finish.c.finish, CeiRow.sealed)
                    .join(last_finish, last_finish.c.cei_id == CeiRow.id)
                    .where(CeiRow.state == "pending", last_finish.c.finish + grace < last)
                    .order_by(CeiRow.id).limit(limit))
                out += [Violation(
                    "no_pending_cei_past_its_windows",
                    f"CEI {cid!r} ({'sealed' if sealed else 'open'}) is pending though its last "
                    f"window closed at chronon {finish} and the loop reached chronon {last}")
                    for cid, finish, sealed in stuck]
        return AuditReport(int(n_ceis), int(n_eis), int(n_chronons),
                           None if last is None else int(last), tuple(out))
