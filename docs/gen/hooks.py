"""mkdocs hook: the reference pages generated from the code at build time (issue 46).

The settings, CLI, metrics and API reference pages are not files in ``docs/``: each
build renders them from the objects they describe (``Settings``, the typer app, the
metrics registries, the FastAPI app's OpenAPI), so they cannot drift from the code.
Everything runs offline: the OpenAPI is dumped in process, nothing is fetched, and
the pages are plain Markdown (no JavaScript renderer, no CDN).

Not a renderer of every OpenAPI construct: it shows what this API uses (paths,
parameters, JSON bodies named by schema, responses by status) and links schemas to
their fields once, at the end of the page.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

#: The generated pages, by their path in the site.
PAGES: dict[str, Callable[[], str]] = {}


def page(path: str) -> Callable[[Callable[[], str]], Callable[[], str]]:
    def register(render: Callable[[], str]) -> Callable[[], str]:
        PAGES[path] = render
        return render
    return register


def _cell(text: object) -> str:
    """One Markdown table cell: pipes escaped, lines joined."""
    return " ".join(str(text).split()).replace("|", "\\|")


GENERATED = (
    "!!! note \"Generated\"\n    This page is generated at build time from {source} "
    "(`docs/gen/hooks.py`): it says what the code does, release by release.\n\n"
)


# --- settings ----------------------------------------------------------------------------


@page("reference/settings.md")
def settings_page() -> str:
    from proxy.settings import Settings, env_name, settings_by_group, settings_table_markdown

    out = ["# Settings\n\n", GENERATED.format(source="`proxy.settings`, one module per group"),
           "Every setting is an environment variable (or a line in `.env` in the working "
           "directory). An invalid value stops start-up with a message naming the variable "
           "and the reason; numeric settings are bounded. How the settings fit together, and "
           "what is configured outside them: [Configuration](../configuration.md).\n\n",
           "## At a glance\n\n", settings_table_markdown().replace("### ", "#### "),
           "\n## Each setting\n\n"]
    for title, names in settings_by_group():
        out.append(f"### {title}\n\n")
        for name in names:
            field = Settings.model_fields[name]
            env = env_name(name)
            default = field.default
            shown = str(default).lower() if isinstance(default, bool) else str(default)
            out.append(f"#### `{env}` {{#{env}}}\n\n")
            out.append(f"Default: `{shown}`" if shown else "Default: empty")
            out.append(f" · field `{name}`\n\n{field.description or ''}\n\n")
    return "".join(out)


# --- CLI ---------------------------------------------------------------------------------


def _commands(group: Any, prefix: str) -> Iterable[tuple[str, Any]]:
    yield prefix, group
    for name, sub in sorted(getattr(group, "commands", {}).items()):
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, f"{prefix} {name}")


@page("reference/cli.md")
def cli_page() -> str:
    import click
    from typer.main import get_command

    from proxy.cli import app

    root = get_command(app)
    out = ["# Command line\n\n", GENERATED.format(source="the typer app `proxy.cli.app`"),
           "Users, keys and the database commands are explained in "
           "[The command line](../cli.md); this page lists every command and option.\n\n"]
    for path, cmd in _commands(root, "proxy"):
        depth = path.count(" ")
        out.append(f"{'#' * min(depth + 2, 6)} `{path}`\n\n")
        if cmd.help:
            out.append(cmd.help.strip().replace("\b\n", "") + "\n\n")
        ctx = click.Context(cmd, info_name=path)
        usage = " ".join(cmd.collect_usage_pieces(ctx))
        out.append(f"```\n{path} {usage}\n```\n\n")
        rows = []
        for p in cmd.params:
            if getattr(p, "hidden", False):
                continue
            if isinstance(p, click.Argument):
                names, kind = p.human_readable_name, "argument"
            else:
                names = ", ".join(p.opts + p.secondary_opts)
                kind = "flag" if getattr(p, "is_flag", False) else "option"
            default = p.default if not callable(p.default) else None
            bare = default in (None, "", ()) or (getattr(p, "is_flag", False) and not default)
            shown = "" if bare else f"`{default}`"
            rows.append(f"| `{names}` | {kind}{' (required)' if p.required else ''} | {shown} | "
                        f"{_cell(getattr(p, 'help', '') or '')} |")
        if rows:
            out.append("| name | kind | default | help |\n|---|---|---|---|\n")
            out.append("\n".join(rows) + "\n\n")
    return "".join(out)


# --- metrics -----------------------------------------------------------------------------


@page("reference/metrics.md")
def metrics_page() -> str:
    from proxy.cluster.worker import WorkerMetrics
    from proxy.service.metrics import ServiceMetrics

    service = ServiceMetrics()
    out = ["# Metrics\n\n", GENERATED.format(
               source="`proxy.service.metrics.ServiceMetrics` and `proxy.cluster.worker.WorkerMetrics`"),
           "`GET /metrics` is the Prometheus text exposition of a process's registry. It is "
           "meant for an internal network; with `PROXY_METRICS_TOKEN` (or "
           "`PROXY_METRICS_TOKEN_FILE`) it answers 401 without `Authorization: Bearer <token>`. "
           "The compose deployment scrapes it with Prometheus and charts it in Grafana "
           "([Deploy with compose](../howto/deploy.md)). Notification metrics are explained in "
           "[Notifications](../notifications.md#metrics).\n\n"]
    for title, registry, names in (
        ("The service (`proxy serve`, roles all, scheduler, api)", service.registry,
         service.exported_names()),
        ("Probe workers (`proxy serve --role worker`)", WorkerMetrics().registry, None),
    ):
        out.append(f"## {title}\n\n| metric | type | samples | help |\n|---|---|---|---|\n")
        for metric in registry.collect():
            samples = sorted({s.name for s in metric.samples} if names is None
                             else {s.name for s in metric.samples} & names)
            labels = sorted({k for s in metric.samples for k in s.labels if k != "le"})
            shown = ", ".join(f"`{s}`" for s in samples) or f"`{metric.name}`"
            if labels:
                shown += "<br>labels: " + ", ".join(f"`{k}`" for k in labels)
            out.append(f"| `{metric.name}` | {metric.type} | {shown} | {_cell(metric.documentation)} |\n")
        out.append("\n")
    return "".join(out)


# --- the REST API, from its OpenAPI ------------------------------------------------------


def _openapi() -> dict[str, Any]:
    from proxy.api.app import make_app
    from proxy.settings import Settings

    # The app is built, never started: no database is opened, no feed is fetched.
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp}/unused.sqlite3")
        spec: dict[str, Any] = make_app(settings).openapi()
    return spec


def _schema_name(schema: dict[str, Any]) -> str:
    """A short type for a schema: a link to a named component, or its type."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{_anchor(name)})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " or ".join(_schema_name(s) for s in schema[key])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_schema_name(schema.get('items', {}))}"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    fmt = schema.get("format")
    return f"{kind} ({fmt})" if fmt else str(kind)


def _anchor(name: str) -> str:
    return "schema-" + name.lower().replace("_", "-").replace(".", "-")


def _body(content: dict[str, Any]) -> str:
    parts = []
    for media, spec in content.items():
        schema = spec.get("schema", {})
        parts.append(f"`{media}`: {_schema_name(schema)}" if schema else f"`{media}`")
    return "; ".join(parts)


@page("reference/api.md")
def api_page() -> str:
    spec = _openapi()
    out = ["# REST API\n\n", GENERATED.format(source="the FastAPI app's OpenAPI (`proxy.api.app.make_app`)"),
           f"{spec['info']['title']} {spec['info']['version']}. {spec['info'].get('description', '')}\n\n"
           "Every route under `/api/v1` needs `Authorization: Bearer KEY`. A running proxy "
           "serves the same description interactively at `/docs` (Swagger UI) and `/redoc`, "
           "offline, and as JSON at `/openapi.json`. Lists, cursors, errors and the routes' "
           "meaning: [The service and its REST API](../api.md).\n\n"]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method in ("get", "put", "post", "delete", "patch"):
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    for tag, ops in by_tag.items():
        out.append(f"## {tag}\n\n")
        for method, path, op in ops:
            out.append(f"### `{method.upper()} {path}`\n\n")
            if op.get("summary"):
                out.append(f"**{op['summary']}.** ")
            if op.get("description"):
                out.append(op["description"].strip() + "\n\n")
            else:
                out.append("\n\n")
            params = op.get("parameters", [])
            if params:
                out.append("| parameter | in | type | required | description |\n|---|---|---|---|---|\n")
                out.extend(f"| `{p['name']}` | {p['in']} | {_schema_name(p.get('schema', {}))} | "
                           f"{'yes' if p.get('required') else 'no'} | "
                           f"{_cell(p.get('description', ''))} |\n" for p in params)
                out.append("\n")
            if "requestBody" in op:
                out.append(f"Body: {_body(op['requestBody'].get('content', {}))}\n\n")
            out.append("| status | meaning | body |\n|---|---|---|\n")
            for status, resp in op.get("responses", {}).items():
                out.append(f"| {status} | {_cell(resp.get('description', ''))} | "
                           f"{_body(resp.get('content', {}))} |\n")
            out.append("\n")
    out.append("## Schemas\n\n")
    for name, schema in sorted(spec.get("components", {}).get("schemas", {}).items()):
        out.append(f"### `{name}` {{#{_anchor(name)}}}\n\n")
        if schema.get("description"):
            out.append(schema["description"].strip() + "\n\n")
        props = schema.get("properties", {})
        required = set(schema.get("required", []))
        if props:
            out.append("| field | type | required | description |\n|---|---|---|---|\n")
            for field, sub in props.items():
                out.append(f"| `{field}` | {_schema_name(sub)} | {'yes' if field in required else 'no'} | "
                           f"{_cell(sub.get('description', ''))} |\n")
            out.append("\n")
        elif "enum" in schema:
            out.append(f"One of {_schema_name(schema)}.\n\n")
    return "".join(out)


# --- mkdocs events -----------------------------------------------------------------------


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated pages to the site (nothing is written under ``docs/``)."""
    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    return files


if __name__ == "__main__":  # `python docs/gen/hooks.py reference/api.md` prints one page
    import sys

    target = sys.argv[1] if len(sys.argv) > 1 else "reference/settings.md"
    print(PAGES[target]() if target in PAGES else json.dumps(_openapi(), indent=2))
