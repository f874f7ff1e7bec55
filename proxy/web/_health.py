"""Why a feed is failing, in words, from its stored health and its last probe."""

from __future__ import annotations

import datetime as dt

from proxy.store import Feed, Probe

_OUTCOME_WORDS = {
    "http_error": "the server answered with an HTTP error",
    "network_error": "the server could not be reached",
    "timeout": "the server did not answer in time",
    "too_large": "the feed is larger than the proxy accepts",
    "parse_error": "the document is not a feed the proxy can read",
    "refused": "the URL was refused by the SSRF guard (it resolves to a private address)",
    "rate_limited": "the server asked the proxy to slow down (429 / Retry-After)",
    "gone": "the server says the feed is gone for good (410)",
}

HEALTHY = ("ok", "not_modified", "redirected", "push")


def explain(feed: Feed, last: Probe | None, now: dt.datetime) -> str:
    """One sentence: ``""`` for a healthy or never-probed feed, else what failed, how often,
    the server's words, and when the proxy will try again."""
    if feed.disabled:
        return f"Disabled: {feed.disabled_reason or 'no reason recorded'}. The proxy no longer probes it."
    outcome = feed.last_outcome
    if outcome is None or outcome in HEALTHY:
        return ""
    words = _OUTCOME_WORDS.get(outcome, f"the last probe ended with {outcome!r}")
    sentence = words[0].upper() + words[1:]
    if last is not None and last.http_status is not None and outcome == "http_error":
        sentence += f" ({last.http_status})"
    if feed.consecutive_errors > 1:
        sentence += f" on the last {feed.consecutive_errors} probes"
    sentence += "."
    if last is not None and last.error:
        sentence += f" Detail: {last.error}."
    if feed.next_allowed_at is not None and feed.next_allowed_at > now:
        wait = int((feed.next_allowed_at - now).total_seconds())
        sentence += (f" Next try not before {feed.next_allowed_at:%H:%M:%S} UTC (in {wait} s: "
                     "the proxy backs off after errors).")
    return sentence
