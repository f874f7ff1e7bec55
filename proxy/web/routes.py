"""The pages under ``/ui``: sign-in, overview, profiles (rule builder, JSON editor, timeline),
feeds (health, add/remove, probe history, OPML).

Every page reads and writes through the same calls as ``proxy/api`` (``service.register_feed``,
``service.create_profile``, ``service.store.list_ceis(user, …)`` …), whose ownership checks
are the API's isolation: another user's profile or feed is "not found" here exactly as it
is a 404 there. No SQL here, and no parsing of the API's JSON lists (their shape may change).

Every POST carries the session's CSRF token (the sign-in form a pre-session one, double
submitted in a cookie); a request without it answers 403 and changes nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from pathlib import Path
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from starlette.datastructures import FormData

from proxy.errors import ConflictError, NotFoundError, RateLimitedError, ValidationError
from proxy.feeds.opml import MAX_OPML_BYTES, OpmlError
from proxy.service import ProxyService, RuleTrial
from proxy.service.opml import export_opml, import_opml
from proxy.web._forms import (
    ENTRY_FIELDS,
    QUERY_ROWS,
    FormErrors,
    add_service_error,
    describe_match,
    parse_json_spec,
    spec_from_form,
    validate_rule,
    validate_spec,
)
from proxy.web._health import HEALTHY, explain
from proxy.web._pictures import budget_svg, completeness_svg, timeline_svg
from proxy.web._session import COOKIE, SessionCodec, WebSession

LOGIN_COOKIE = "proxy_ui_login"
STATES = ("pending", "captured", "missed")

templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))


def _base(request: Request) -> str:
    """The UI's URL path as the browser sees it (behind a reverse proxy: ``root_path`` first)."""
    return f"{request.scope.get('root_path', '').rstrip('/')}/ui"


class WebUi:
    """The UI's routes, bound to a session codec and the cookie policy."""

    def __init__(self, codec: SessionCodec, *, secure_cookie: bool) -> None:
        self.codec = codec
        self.secure = secure_cookie
        self.router = APIRouter(prefix="/ui", include_in_schema=False)
        r = self.router
        r.add_api_route("", self.home, methods=["GET"])
        r.add_api_route("/sign-in", self.sign_in, methods=["POST"])
        r.add_api_route("/sign-out", self.sign_out, methods=["POST"])
        r.add_api_route("/overview", self.overview, methods=["GET"])
        r.add_api_route("/overview/live", self.overview_live, methods=["GET"])
        r.add_api_route("/profiles", self.profiles, methods=["GET"])
        r.add_api_route("/profiles", self.create_from_form, methods=["POST"])
        r.add_api_route("/profiles/json", self.create_from_json, methods=["POST"])
        r.add_api_route("/profiles/test", self.try_from_form, methods=["POST"])
        r.add_api_route("/profiles/{profile_id}", self.profile, methods=["GET"])
        r.add_api_route("/profiles/{profile_id}/json", self.replace_from_json, methods=["POST"])
        r.add_api_route("/profiles/{profile_id}/delete", self.delete_profile, methods=["POST"])
        r.add_api_route("/feeds", self.feeds, methods=["GET"])
        r.add_api_route("/feeds", self.add_feed, methods=["POST"])
        r.add_api_route("/feeds/opml", self.export_feeds, methods=["GET"])
        r.add_api_route("/feeds/opml", self.import_feeds, methods=["POST"])
        r.add_api_route("/feeds/{feed_id}", self.feed, methods=["GET"])
        r.add_api_route("/feeds/{feed_id}/delete", self.delete_feed, methods=["POST"])

    # ------------------------------------------------------------------ plumbing

    @staticmethod
    def _service(request: Request) -> ProxyService:
        service: ProxyService = request.app.state.service
        return service

    async def _session(self, request: Request) -> WebSession | None:
        """The request's session while its API key is unrevoked, else ``None``."""
        session = self.codec.loads(request.cookies.get(COOKIE))
        if session is None:
            return None
        user = await self._service(request).store.active_key_user(session.key_id)
        return session if user == session.user_id else None

    def _set_cookie(self, request: Request, response: Response, name: str, value: str,
                    max_age: int | None) -> None:
        response.set_cookie(name, value, max_age=max_age, path=_base(request), httponly=True,
                            secure=self.secure, samesite="lax")

    def _page(self, request: Request, template: str, session: WebSession | None, status: int = 200,
              **context: Any) -> HTMLResponse:
        context.update(base=_base(request), session=session, now=dt.datetime.now(dt.UTC))
        response = templates.TemplateResponse(request, template, context, status_code=status)
        response.headers["Cache-Control"] = "no-store"
        return response

    def _to_sign_in(self, request: Request) -> RedirectResponse:
        return RedirectResponse(f"{_base(request)}", status_code=303)

    async def _form(self, request: Request, session: WebSession) -> FormData | None:
        """The POSTed form if its CSRF token is the session's, else ``None``."""
        form = await request.form(max_part_size=MAX_OPML_BYTES)
        token = form.get("csrf")
        if not session.csrf_ok(token if isinstance(token, str) else None):
            await form.close()
            return None
        return form

    async def _posted(self, request: Request) -> tuple[WebSession, FormData] | Response:
        """A form POST's session and form; else the answer: sign in first, or 403 (CSRF)."""
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        form = await self._form(request, session)
        if form is None:
            return self._forbidden(request, session)
        return session, form

    def _forbidden(self, request: Request, session: WebSession | None) -> HTMLResponse:
        return self._page(request, "message.html", session, status=403, title="Refused",
                          message="The form's CSRF token is missing or wrong: reload the page and "
                                  "try again. Nothing was changed.")

    def _not_found(self, request: Request, session: WebSession, exc: NotFoundError) -> HTMLResponse:
        return self._page(request, "message.html", session, status=404, title="Not found",
                          message=str(exc))

    async def _user_name(self, request: Request, session: WebSession) -> str:
        return (await self._service(request).store.get_user(session.user_id)).name

    # ------------------------------------------------------------------ sign-in

    async def home(self, request: Request) -> Response:
        """The sign-in form for a visitor; the overview for a signed-in user."""
        if await self._session(request) is not None:
            return RedirectResponse(f"{_base(request)}/overview", status_code=303)
        return self._sign_in_page(request)

    def _sign_in_page(self, request: Request, error: str = "", name: str = "",
                      status: int = 200) -> HTMLResponse:
        # One token per browser while it stays on the sign-in form (several tabs keep working).
        token = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(24)
        response = self._page(request, "sign_in.html", None, status=status, login_csrf=token,
                              error=error, name=name)
        self._set_cookie(request, response, LOGIN_COOKIE, token, max_age=3600)
        return response

    async def sign_in(self, request: Request) -> Response:
        form = await request.form()
        sent, expected = form.get("csrf"), request.cookies.get(LOGIN_COOKIE)
        if not (isinstance(sent, str) and expected and secrets.compare_digest(sent, expected)):
            return self._sign_in_page(request, "The sign-in form expired: please try again.", status=403)
        name = str(form.get("name", "")).strip()
        key = str(form.get("key", "")).strip()
        store = self._service(request).store
        record = await store.authenticate_key(key)
        if record is not None and name and (await store.get_user(record.user_id)).name != name:
            record = None  # a key of another user than the one named: as unknown as a wrong key
        if record is None:
            return self._sign_in_page(request, "Unknown or revoked API key (or not this user's).",
                                      name=name, status=401)
        session = self.codec.new(record.user_id, record.id)
        response = RedirectResponse(f"{_base(request)}/overview", status_code=303)
        self._set_cookie(request, response, COOKIE, self.codec.dumps(session),
                         max_age=int(self.codec.max_age_seconds))
        response.delete_cookie(LOGIN_COOKIE, path=_base(request))
        return response

    async def sign_out(self, request: Request) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        response = self._to_sign_in(request)
        response.delete_cookie(COOKIE, path=_base(request), secure=self.secure, httponly=True,
                               samesite="lax")
        return response

    # ------------------------------------------------------------------ overview

    async def _overview_context(self, request: Request, session: WebSession) -> dict[str, Any]:
        service = self._service(request)
        summary = await service.store.metrics_summary(session.user_id, recent_chronons=60)
        chronons = await service.store.recent_chronons(60)
        steps = await service.store.resolutions(session.user_id)
        settings = service.settings
        return {
            "summary": summary,
            "budget_picture": Markup(budget_svg(chronons)),
            "completeness_picture": Markup(completeness_svg(steps)),
            "policy": settings.policy,
            "budget": settings.budget,
            "chronon_seconds": settings.chronon_seconds,
            "last_chronon": chronons[-1].chronon if chronons else None,
        }

    async def overview(self, request: Request) -> Response:
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        context = await self._overview_context(request, session)
        return self._page(request, "overview.html", session, user=await self._user_name(request, session),
                          **context)

    async def overview_live(self, request: Request) -> Response:
        """The overview's live part alone: the page's script fetches it every few seconds."""
        session = await self._session(request)
        if session is None:
            return Response(status_code=401)
        context = await self._overview_context(request, session)
        return self._page(request, "_overview_live.html", session, **context)

    # ------------------------------------------------------------------ profiles

    async def _feed_choices(self, request: Request, session: WebSession) -> list[tuple[int, str]]:
        feeds = await self._service(request).store.list_registered_feeds(session.user_id)
        return [(r.feed.id, r.registration.url) for r in feeds]

    async def _profiles_page(self, request: Request, session: WebSession, *, status: int = 200,
                             errors: FormErrors | None = None, json_errors: FormErrors | None = None,
                             form: dict[str, Any] | None = None, multi: dict[str, list[str]] | None = None,
                             json_text: str = "", created: str = "",
                             trial: RuleTrial | None = None) -> HTMLResponse:
        service = self._service(request)
        summary = await service.store.metrics_summary(session.user_id, recent_chronons=1)
        profiles = await service.store.list_profiles(session.user_id)
        completeness = {p.profile_id: p for p in summary.profiles}
        example = {"name": "my profile", "rules": [{"name": "rule", "trigger": {"feed": 1, "every": "5m"},
                                                      "query": [{"feed": 2, "within": "10m"}]}]}
        return self._page(
            request, "profiles.html", session, status=status, profiles=profiles,
            completeness=completeness, feeds=await self._feed_choices(request, session),
            errors=errors or FormErrors(), json_errors=json_errors or FormErrors(),
            form=form or {}, multi=multi or {}, query_rows=range(QUERY_ROWS),
            json_text=json_text or json.dumps(example, indent=2), created=created,
            trial=trial, entry_fields=ENTRY_FIELDS, describe_match=describe_match,
        )

    async def profiles(self, request: Request) -> Response:
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        return await self._profiles_page(request, session, created=request.query_params.get("created", ""))

    async def _store_profile(self, request: Request, session: WebSession, data: Any,
                             errors: FormErrors, profile_id: int | None = None) -> int | None:
        """Validate as the API does and store; the profile's id, or ``None`` with ``errors``."""
        spec = validate_spec(data, errors)
        if spec is None:
            return None
        service = self._service(request)
        try:
            if profile_id is None:
                return (await service.create_profile(session.user_id, spec)).id
            return (await service.replace_profile(session.user_id, profile_id, spec)).id
        except ValidationError as exc:
            add_service_error(exc, errors)
        except ConflictError as exc:
            errors.add("name", str(exc))
        return None

    async def create_from_form(self, request: Request) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, form = posted
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        multi = {k: [v for v in form.getlist(k) if isinstance(v, str)] for k in form}
        errors = FormErrors()
        pid = await self._store_profile(request, session, spec_from_form(fields, multi), errors)
        if pid is None:
            return await self._profiles_page(request, session, status=422, errors=errors,
                                             form=fields, multi=multi)
        return RedirectResponse(f"{_base(request)}/profiles/{pid}", status_code=303)

    async def try_from_form(self, request: Request) -> Response:
        """"Test on the feed now": the builder's rule tried on its feeds' current documents
        (``POST /api/v1/rules/test``'s dry run), shown under the form, which keeps its inputs."""
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, form = posted
        fields = {k: v for k, v in form.items() if isinstance(v, str)}
        multi = {k: [v for v in form.getlist(k) if isinstance(v, str)] for k in form}
        errors = FormErrors()
        rule = validate_rule(spec_from_form(fields, multi), errors)
        trial = None
        if rule is not None:
            try:
                trial = await self._service(request).try_rule(session.user_id, rule)
            except ValidationError as exc:
                add_service_error(exc, errors, prefix="rules.0.")
            except RateLimitedError as exc:
                errors.add("", str(exc))
                return await self._profiles_page(request, session, status=429, errors=errors,
                                                 form=fields, multi=multi)
        return await self._profiles_page(request, session, status=422 if errors else 200,
                                         errors=errors, form=fields, multi=multi, trial=trial)

    async def create_from_json(self, request: Request) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, form = posted
        text = str(form.get("spec", ""))
        errors = FormErrors()
        spec = parse_json_spec(text, errors)
        pid = None if spec is None else await self._store_profile(
            request, session, spec.model_dump(mode="json", exclude_none=True), errors)
        if pid is None:
            return await self._profiles_page(request, session, status=422, json_errors=errors,
                                             json_text=text)
        return RedirectResponse(f"{_base(request)}/profiles/{pid}", status_code=303)

    async def profile(self, request: Request, profile_id: int,
                      state: Literal["pending", "captured", "missed"] | None = None) -> Response:
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        return await self._profile_page(request, session, profile_id, state)

    async def _profile_page(self, request: Request, session: WebSession, profile_id: int,
                            state: str | None, *, status: int = 200, json_text: str = "",
                            json_errors: FormErrors | None = None) -> Response:
        service = self._service(request)
        store = service.store
        try:
            profile = await store.get_profile(session.user_id, profile_id)
            ceis = await store.list_ceis(session.user_id, profile_id, state, limit=40)  # type: ignore[arg-type]
            entries = await store.captured_entries(session.user_id, profile_id, limit=200)
            rules_now = await service.status_of(profile)
        except NotFoundError as exc:
            return self._not_found(request, session, exc)
        names = dict(await self._feed_choices(request, session))
        by_cei: dict[str, list[Any]] = {}
        for captured in entries:
            by_cei.setdefault(captured.cei_id, []).append(captured)
        spec = {"name": profile.name, "rules": [{**r.spec, "name": r.name} for r in profile.rules]}
        if profile.notify:
            spec["notify"] = profile.notify
        return self._page(
            request, "profile.html", session, status=status, profile=profile, ceis=ceis, rules_now=rules_now,
            state=state or "", states=STATES, entries=by_cei, feed_names=names,
            timeline=Markup(timeline_svg(ceis, names, service.clock.start_of)),
            json_text=json_text or json.dumps(spec, indent=2), json_errors=json_errors or FormErrors(),
        )

    async def replace_from_json(self, request: Request, profile_id: int) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, form = posted
        text = str(form.get("spec", ""))
        errors = FormErrors()
        spec = parse_json_spec(text, errors)
        try:
            pid = None if spec is None else await self._store_profile(
                request, session, spec.model_dump(mode="json", exclude_none=True), errors, profile_id)
        except NotFoundError as exc:
            return self._not_found(request, session, exc)
        if pid is None:
            return await self._profile_page(request, session, profile_id, None, status=422,
                                            json_text=text, json_errors=errors)
        return RedirectResponse(f"{_base(request)}/profiles/{pid}", status_code=303)

    async def delete_profile(self, request: Request, profile_id: int) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, _ = posted
        try:
            await self._service(request).delete_profile(session.user_id, profile_id)
        except NotFoundError as exc:
            return self._not_found(request, session, exc)
        return RedirectResponse(f"{_base(request)}/profiles", status_code=303)

    # ------------------------------------------------------------------ feeds

    async def _feeds_page(self, request: Request, session: WebSession, *, status: int = 200,
                          url_error: str = "", url: str = "", message: str = "",
                          report: list[Any] | None = None) -> HTMLResponse:
        service = self._service(request)
        now = dt.datetime.now(dt.UTC)
        rows = []
        for registered in await service.store.list_registered_feeds(session.user_id):
            feed = registered.feed
            failing = feed.disabled or (feed.last_outcome is not None and feed.last_outcome not in HEALTHY)
            last = None
            if failing:
                probes = await service.store.list_probes(feed.id, limit=1)
                last = probes[0] if probes else None
            why = explain(feed, last, now)
            # The shared feed's URL may be another user's (with their secret): show the user's own.
            why = why.replace(feed.url, registered.registration.url)
            rows.append({"r": registered, "feed": feed, "why": why, "failing": failing})
        return self._page(request, "feeds.html", session, status=status, rows=rows, url_error=url_error,
                          url=url, message=message, report=report)

    async def feeds(self, request: Request) -> Response:
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        return await self._feeds_page(request, session)

    async def add_feed(self, request: Request) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, form = posted
        url = str(form.get("url", "")).strip()
        if not url:
            return await self._feeds_page(request, session, status=422, url_error="enter the feed's URL")
        try:
            registered, created = await self._service(request).register_feed(session.user_id, url)
        except ValidationError as exc:
            return await self._feeds_page(request, session, status=422, url_error=str(exc), url=url)
        what = "added" if created else "already yours"
        return await self._feeds_page(request, session, message=f"Feed {registered.feed.id} {what}: {url}")

    async def delete_feed(self, request: Request, feed_id: int) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, _ = posted
        try:
            await self._service(request).delete_feed(session.user_id, feed_id)
        except NotFoundError as exc:
            return self._not_found(request, session, exc)
        except ConflictError as exc:
            return await self._feeds_page(request, session, status=409, message=str(exc))
        return await self._feeds_page(request, session, message=f"Feed {feed_id} removed.")

    async def feed(self, request: Request, feed_id: int) -> Response:
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        service = self._service(request)
        try:
            # The API's ownership check (GET /api/v1/feeds/{id}) before anything of the feed is read.
            registered = await service.store.get_registered_feed(session.user_id, feed_id)
        except NotFoundError as exc:
            return self._not_found(request, session, exc)
        probes = await service.store.list_probes(feed_id, limit=100)
        shared, own = registered.feed.url, registered.registration.url
        history = [{"p": p, "error": (p.error or "").replace(shared, own)} for p in probes]
        why = explain(registered.feed, probes[0] if probes else None, dt.datetime.now(dt.UTC))
        model = await service.update_model(registered.feed)
        expected = None if model is None else model.next_expected_at()  # as GET /api/v1/feeds/{id} says it
        push = await service.push_status(feed_id)  # the API's `push` (issue 44, docs/websub.md)
        return self._page(request, "feed.html", session, r=registered, history=history,
                          why=why.replace(shared, own), model=model, expected=expected, push=push)

    async def import_feeds(self, request: Request) -> Response:
        posted = await self._posted(request)
        if isinstance(posted, Response):
            return posted
        session, form = posted
        upload = form.get("file")
        document = b"" if upload is None or isinstance(upload, str) else await upload.read()
        await form.close()
        try:
            report = await import_opml(self._service(request), session.user_id, document)
        except OpmlError as exc:
            return await self._feeds_page(request, session, status=422, message=f"OPML not imported: {exc}")
        counts = {s: sum(o.status == s for o in report) for s in ("added", "known", "refused")}
        message = ", ".join(f"{n} {s}" for s, n in counts.items())
        return await self._feeds_page(request, session, message=f"OPML imported: {message}.", report=report)

    async def export_feeds(self, request: Request) -> Response:
        session = await self._session(request)
        if session is None:
            return self._to_sign_in(request)
        name = await self._user_name(request, session)
        body = await export_opml(self._service(request), session.user_id, user_name=name)
        return Response(body, media_type="text/x-opml; charset=utf-8",
                        headers={"Content-Disposition": 'attachment; filename="feeds.opml"'})
