"""The chronon, the probe budget and the policy that spends it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from proxy.settings._base import (
    DAY,
    HOUR,
    MAX_BUDGET,
    MIN_CHRONON_SECONDS,
    WEEK,
    SettingsGroup,
    known_policy_names,
)


class SchedulingSettings(SettingsGroup):
    """Scheduling: the chronon, the probe budget and the policy that spends it."""

    chronon_seconds: float = Field(
        default=60.0, ge=MIN_CHRONON_SECONDS, le=DAY,
        description="Length of one chronon (scheduling step) in seconds: 0.01 (10 ms) to 86400 (a day)."
    )
    budget: int = Field(
        default=10, ge=1, le=MAX_BUDGET, description="Probes allowed per chronon (C): 1 to 100000."
    )
    policy: str = Field(
        default="adm-edf",
        description="Scheduling policy name, as in the workload spec (e.g. `mrsf-p`, `s-edf-np`, `wic`).",
    )
    discovery_predicted: Literal["off", "sup", "fbsup"] = Field(
        default="off",
        description=(
            "Predicted EIs for watched feeds that do not ping (paper 002): `sup` probes each "
            "feed's next expected update at the end of the window its rules ask, `fbsup` also "
            "re-predicts after a probe that found nothing, `off` leaves the spare budget to the "
            "background allocation alone (measured better: docs/discovery.md)."
        ),
    )
    discovery_revisit_factor: float = Field(
        default=5.0, ge=0, le=100,
        description=(
            "The longest a watched feed that never pings may go unprobed, as a multiple of a plain "
            "round-robin's cycle over the watched feeds (feeds / budget chronons), never below the "
            "rules' window + 1 (issue 45): unfunded feeds still come in turn, at the cost of a share "
            "of the budget of at most 1 / this. 1: round-robin itself; 0: no bound "
            "(docs/discovery.md, \"A bound on the tail\")."
        ),
    )
    discovery_coupdate: bool = Field(
        default=False,
        description=(
            "Learn which watched feeds update together (an update a probe finds on one raises the chance "
            "its partners changed too) and probe a partner the learnt model says likely changed, within a "
            "tenth of the budget the capture frequencies then leave (issue 45). Off: not measured better "
            "than that tenth left to the fill without the model (docs/discovery.md, \"Co-updates\")."
        ),
    )
    discovery_hazard: float = Field(
        default=0.0, ge=0,
        description=(
            "Read each watched feed without a seasonal or periodic model at its age since its last "
            "dated publication: a hazard by age relative to the feed's mean rate, learnt from every "
            "probe's dates and pooled over the feeds, each age bin shrunk toward Poisson by this many "
            "expected updates (5 in the benchmarks; issue 45). 0: off. Off: about 1.4 points on "
            "single-feed alerts in the replica, level live and on the rank-3 workload, and a loss at "
            "the real trace's own pace (docs/discovery.md, \"Age hazards\")."
        ),
    )
    discovery_tail_budget: float = Field(
        default=0.3, ge=0, le=1,
        description=(
            "The share of the budget the background allocation may move from its capture frequencies "
            "so that the watched feeds holding 90 % of the updates (by their learnt rates, those no rule "
            "waits for now too) are probed at least once per 0.85 of a round-robin's cycle: the p90 "
            "detection delay about halves, and on the real trace comes near a plain reader's or below "
            "it, for about 5 points of completeness; 0.45 went lower still but once fell under 1.3x the "
            "better reader (issue 45). "
            "Needs the revisit bound on (`PROXY_DISCOVERY_REVISIT_FACTOR`), which keeps the feeds no "
            "rule waits for now watched. 0: off (docs/discovery.md, \"The tail where the updates are\")."
        ),
    )
    discovery_tail_target: float = Field(
        default=0.1, ge=0, le=1,
        description=(
            "Makes the tail floor adaptive: it spends only what brings the share of the updates "
            "expected to wait past its period (from the learnt rates and the probe periods planned) "
            "down to this, nothing when that share is already there, and nothing when "
            "`PROXY_DISCOVERY_TAIL_BUDGET` cannot bring it to `PROXY_DISCOVERY_TAIL_HOPELESS` (many "
            "watched feeds per probe, where the whole share would buy a slow round-robin: on held-out "
            "500- and 2,000-feed traces the fixed floor cost 10 to 15 points and this gives them back). "
            "0 (with `PROXY_DISCOVERY_TAIL_HOPELESS=1`): the fixed floor of issue 45's second session "
            "(docs/discovery.md, \"An adaptive tail floor\")."
        ),
    )
    discovery_tail_hopeless: float = Field(
        default=0.2, ge=0, le=1,
        description=(
            "The tail floor spends nothing when its budget share would still leave more than this share "
            "of the updates expected to wait past its period. 1: never skipped."
        ),
    )
    discovery_tail_sticky: int = Field(
        default=0, ge=0,
        description=(
            "A recomputation whose adaptive tail floor takes no feed (mostly the "
            "`PROXY_DISCOVERY_TAIL_HOPELESS` test, which on the real trace flips the floor on and off "
            "between recomputations) keeps the feeds the last floor took, at its period, for up to this "
            "many recomputations in a row; the next floor that takes a feed starts the count again. "
            "0 (the default): each recomputation on its own. 3 met both halves of issue 45's target on "
            "9 of 38 unused traces against 6 in the replica (real draws +2 points, synthetic 60-feed "
            "traces -1.9) but lost 1.8 points live over six seeds, so it is not the default "
            "(docs/discovery.md, \"A sticky tail floor\")."
        ),
    )
    discovery_publisher_hints: bool = Field(
        default=False,
        description=(
            "Take the update interval a feed's document states (RSS 1.0 syndication module "
            "`sy:updatePeriod`/`sy:updateFrequency`, else `<ttl>`) as the prior of its rate, in place "
            "of the other feeds' pooled rate, until its own record outweighs it (issue 45). Off: "
            "honest hints win in the benchmarks, but no trace carries real publishers' hints, and a "
            "platform's default stated for every feed costs a little (docs/discovery.md, \"Publisher "
            "hints and regime shifts\"). "
            "`Cache-Control`, `Expires` and `<ttl>` delay a feed's next probe either way "
            "(`PROXY_RESPECT_CACHE_HINTS`)."
        ),
    )
    discovery_changepoint: bool = Field(
        default=False,
        description=(
            "Watch each feed's probes for a regime shift in its update rate (a two-sided Poisson "
            "CUSUM) and, once one is found, learn its rate from the probes since the shift alone "
            "(issue 45). Off: not measured better (docs/discovery.md, \"Publisher hints and regime "
            "shifts\")."
        ),
    )
    unwatched_probe_interval_seconds: float = Field(
        default=HOUR, ge=0, le=WEEK,
        description=(
            "How often budget that no rule needs probes a registered feed that no rule reads "
            "(an OPML import, say): never-probed feeds first, then the stalest, each at most once "
            "per this many seconds, so their health and update models stay current and a rule "
            "made later starts from a learnt model. 0: never."
        ),
    )

    @field_validator("discovery_revisit_factor")
    @classmethod
    def _revisit_factor(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError(f"the revisit factor must be 0 (no bound) or at least 1, got {value}")
        return value

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        names = known_policy_names()
        if value not in names:
            raise ValueError(f"unknown policy {value!r}; choose one of: {', '.join(names)}")
        return value
