"""A notification as a short text, for Apprise targets (mail, chat, push): title and body.

Pure: the same document always renders to the same text. It does not try to
be complete (the JSON document is); it says what happened and links the entries.
"""

from __future__ import annotations

from proxy.notify.payload import Notification

__all__ = ["render_text"]

_MAX_SUMMARY = 200


def render_text(n: Notification) -> tuple[str, str]:
    """``(title, body)`` of a notification."""
    rule = f" / {n.rule.name}" if n.rule is not None else ""
    verb = "captured" if n.type == "captured" else "missed"
    title = f"[{n.profile.name}{rule}] {verb}: CEI {n.cei.id}"
    # A captured CEI whose condition never held is a check made in time, not news (issue 23).
    held = "the rule fired" if n.cei.fired else "the rule did not fire (its trigger was only checked)"
    lines = [f"Profile {n.profile.name!r}{rule}: CEI {n.cei.id} was {verb}; {held}."]
    if n.matched:
        lines.append("Matched:")
    for m in n.matched:
        what = (f"'{m.keyword}' in {m.field}" if m.keyword is not None
                else f"/{m.pattern}/ in {m.field}" if m.pattern is not None else "any new entry")
        lines.append(f"- {m.title or '(untitled)'}" + (f" <{m.link}>" if m.link else "")
                     + f": {what}")
    for ei in n.eis:
        when = f", window {ei.window_start:%Y-%m-%d %H:%M:%S}Z" if ei.window_start else ""
        head = f"- {ei.feed_url} ({ei.state}{when})"
        if ei.state == "captured" and ei.captured_at is not None:
            head += f", probed at {ei.captured_at:%H:%M:%S}Z"
        if ei.missed_reason == "window_passed":
            head += ": the window passed before a successful probe"
        elif ei.missed_reason == "feed_failing" and ei.feed_failure is not None:
            f = ei.feed_failure
            status = f" {f.http_status}" if f.http_status else ""
            detail = f" ({f.error})" if f.error else ""
            head += f": the feed was failing: {f.outcome}{status}{detail}"
        lines.append(head)
        for entry in ei.entries:
            lines.append(f"    * {entry.title or '(untitled)'}" + (f" <{entry.link}>" if entry.link else ""))
            if entry.summary:
                summary = " ".join(entry.summary.split())
                if len(summary) > _MAX_SUMMARY:
                    summary = summary[: _MAX_SUMMARY - 1] + "…"
                lines.append(f"      {summary}")
        if ei.more_entries:
            lines.append(f"    * … and {ei.more_entries} more")
    return title, "\n".join(lines)
