"""The rule builder: a flat HTML form in, the JSON body of ``POST /api/v1/profiles`` out.

Every input is named by the path of the field it fills in the profile spec
(``rules.0.trigger.every``, ``rules.0.query.1.within``), which is also the ``loc`` of the
API's validation errors for that field: an error is shown next to the input of the same
name, or, for an error about a whole object (``rules.0.trigger``: "exactly one of …"),
next to that object's fieldset. Validation is the API's own: :class:`~proxy.rules.ProfileSpec`
and the service's checks, whose messages are shown unchanged.

The form builds one rule (a single-feed alert, a trigger rule with up to :data:`QUERY_ROWS`
query feeds, or a watch rule) and at most one notify target; the JSON editor takes anything
the API takes. Its "Test on the feed now" button posts the same inputs for a dry run of the
rule alone (:func:`validate_rule`, ``POST /api/v1/rules/test``'s checks).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic

from proxy.errors import ValidationError
from proxy.rules import Match, ProfileSpec, RuleSpec
from proxy.rules.matching import DEFAULT_FIELDS, FIELDS

QUERY_ROWS = 3
#: The kinds of rule the builder makes; an alert is a trigger without query feeds.
KINDS = ("alert", "trigger", "watch")
#: The entry fields a condition may read, as the checkboxes offer them (docs/rules.md).
ENTRY_FIELDS = FIELDS


@dataclass
class FormErrors:
    """Messages by field path (``""``: about the whole profile)."""

    by_loc: dict[str, list[str]] = field(default_factory=dict)

    def add(self, loc: str, message: str) -> None:
        self.by_loc.setdefault(loc, []).append(message)

    def at(self, loc: str) -> list[str]:
        return self.by_loc.get(loc, [])

    def __bool__(self) -> bool:
        return bool(self.by_loc)

    def lines(self) -> list[str]:
        return [f"{loc}: {m}" if loc else m for loc, ms in self.by_loc.items() for m in ms]


def _text(form: Mapping[str, Any], name: str) -> str | None:
    value = form.get(name)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _when(form: Mapping[str, Any], multi: Mapping[str, list[str]]) -> dict[str, Any]:
    """The rule's ``when`` from the condition inputs (empty: no condition)."""
    when: dict[str, Any] = {}
    for part in ("contains", "all", "exclude"):
        if (words := _text(form, f"rules.0.trigger.when.{part}")) is not None:
            when[part] = [w.strip() for w in words.split(",") if w.strip()]
    if (regex := _text(form, "rules.0.trigger.when.regex")) is not None:
        when["regex"] = regex
    # No box ticked reads as the default (title and summary), as does ticking just those:
    # then 'fields' is left out, so the stored rule reads back as written.
    fields = [f for f in multi.get("rules.0.trigger.when.fields", []) if f]
    if when and fields and tuple(fields) != DEFAULT_FIELDS:
        when["fields"] = fields
    return when


def spec_from_form(form: Mapping[str, Any], multi: Mapping[str, list[str]]) -> dict[str, Any]:
    """The profile JSON the builder's inputs describe (not yet validated: blanks are left
    out, so the API's own messages say what is missing)."""
    rule: dict[str, Any] = {"name": _text(form, "rules.0.name") or ""}
    kind = form.get("kind", "trigger")
    if kind == "watch":
        rule["watch"] = {"feeds": [f for f in multi.get("rules.0.watch.feeds", []) if f],
                         "within": _text(form, "rules.0.watch.within") or ""}
        # The condition inputs serve both kinds (issue 43: a watched update counts only if an
        # entry matches); they keep the trigger's names, so one set of boxes fills either.
        if when := _when(form, multi):
            rule["watch"]["when"] = when
    else:
        trigger: dict[str, Any] = {"feed": _text(form, "rules.0.trigger.feed") or ""}
        schedule = form.get("schedule", "every")
        if schedule == "every":
            trigger["every"] = _text(form, "rules.0.trigger.every") or ""
            if (slack := _text(form, "rules.0.trigger.slack")) is not None:
                trigger["slack"] = slack
        elif schedule == "cron":
            trigger["cron"] = _text(form, "rules.0.trigger.cron") or ""
            if (tz := _text(form, "rules.0.trigger.timezone")) is not None:
                trigger["timezone"] = tz
        else:
            trigger["on"] = "update"
        if when := _when(form, multi):
            trigger["when"] = when
        rule["trigger"] = trigger
        queries = []
        # An alert reads its trigger feed alone: query rows left filled in do not count.
        for i in range(QUERY_ROWS if kind != "alert" else 0):
            feed = _text(form, f"rules.0.query.{i}.feed")
            if feed is None:
                continue
            query: dict[str, Any] = {"feed": feed}
            if form.get(f"rules.0.query.{i}.overwrite"):
                query["overwrite"] = True
            else:
                query["within"] = _text(form, f"rules.0.query.{i}.within") or ""
            queries.append(query)
        if queries:
            rule["query"] = queries
    spec: dict[str, Any] = {"name": _text(form, "name") or "", "rules": [rule]}
    kind = form.get("notify.kind", "")
    if kind in ("webhook", "apprise") and (url := _text(form, "notify.0.url")) is not None:
        spec["notify"] = [{kind: url, "events": multi.get("notify.0.events") or ["captured"]}]
    return spec


def validate_spec(data: Any, errors: FormErrors) -> ProfileSpec | None:
    """``ProfileSpec`` of ``data``, or ``None`` with the API's messages added to ``errors``."""
    try:
        return ProfileSpec.model_validate(data)
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            errors.add(".".join(str(p) for p in err["loc"]), err["msg"])
        return None


def validate_rule(data: dict[str, Any], errors: FormErrors) -> RuleSpec | None:
    """The builder's one rule (``data["rules"][0]``) as a ``RuleSpec``, for a dry run: the
    profile's name and notify targets are not needed to try it. Messages go to the rule's
    inputs (``rules.0.…``), as a create would put them."""
    try:
        return RuleSpec.model_validate(data["rules"][0])
    except pydantic.ValidationError as exc:
        for err in exc.errors():
            errors.add(".".join(str(p) for p in ("rules", 0, *err["loc"])), err["msg"])
        return None


def parse_json_spec(text: str, errors: FormErrors) -> ProfileSpec | None:
    """The JSON editor's text as a spec; a JSON syntax error is named with its line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        errors.add("json", f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}")
        return None
    return validate_spec(data, errors)


def add_service_error(exc: ValidationError, errors: FormErrors, prefix: str = "") -> None:
    """A refusal of the service (unknown feed, unsafe webhook …): at its ``loc`` if it has one.
    The message drops a leading ``loc: `` (it is shown next to that field already). ``prefix``
    puts a rule's own ``loc`` (a dry run's ``trigger.feed``) where the form has it
    (``rules.0.trigger.feed``)."""
    loc = str(getattr(exc, "loc", "") or "")
    message = str(exc)
    if loc and message.startswith(f"{loc}: "):
        message = message[len(loc) + 2:]
    errors.add(f"{prefix}{loc}" if loc else loc, message)


def describe_match(match: Match | None) -> str:
    """Why a dry run's entry matches, in words (``""``: it does not)."""
    if match is None:
        return ""
    if match.kind == "any":
        return "any entry counts (no keyword asked)"
    if match.kind == "regex":
        return f"regex {match.text} found in {match.field}"
    part = "one of the keywords" if match.kind == "contains" else "all keywords, the first"
    return f"{part}: “{match.text}” in {match.field}"


def fieldset_errors(errors: FormErrors, prefixes: tuple[str, ...]) -> list[str]:
    """Errors about an object as a whole (exactly ``prefix``) for each fieldset prefix."""
    return [m for p in prefixes for m in errors.at(p)]
