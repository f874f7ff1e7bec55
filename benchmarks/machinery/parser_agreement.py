"""Agreement of the fast feed parsers with feedparser over the real-world corpus.

For every document in ``../shared/corpus`` (feedparser's test suite and
reader's test feeds) this compares, entry by entry, the identity, link, title
and date that each parser yields (through the same adapters the feed layer
uses) with feedparser's, and times each parser.  It reports:

* raw agreement of ``fastfeedparser`` and ``feedparser-rs`` on all documents;
* the same restricted to documents the hot path sends to the fast parser
  (:func:`proxy.feeds.parse.fast_path_eligible` + the entry-count check);
* the agreement of the hot path as shipped (``parse_document``) with feedparser.

Run:  .venv/bin/python benchmarks/machinery/parser_agreement.py [--corpus ../shared/corpus] [--out docs/parser-agreement.md]
"""

from __future__ import annotations

import argparse
import io
import platform
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_probe import make_rss  # the script's directory is on sys.path

from proxy.feeds.parse import (
    FeedParseError,
    ParsedFeed,
    _feedparser_entries,
    _is_json_feed,
    _parse_fast,
    fast_path_eligible,
    parse_document,
    parse_with_feedparser,
    precheck,
)

BASE = "http://example.test/feed.xml"
Key = tuple[tuple[str, str | None, str | None, str | None], ...]


def _key(parsed: ParsedFeed | None) -> Key | None:
    if parsed is None:
        return None
    return tuple(
        (e.identity, e.link, e.title, e.published.isoformat() if e.published else None)
        for e in parsed.entries
    )


def _reference(body: bytes) -> Key | None:
    try:
        return _key(parse_with_feedparser(body, url=BASE))
    except FeedParseError:
        return None


def _raw_fast(body: bytes) -> ParsedFeed | None:
    import fastfeedparser

    from proxy.feeds.parse import _make_entry, _text, _utc_from_iso

    try:
        d = fastfeedparser.parse(body, include_tags=False, include_media=False, include_enclosures=False)
    except Exception:
        return None
    from urllib.parse import urljoin

    out = []
    for e in d.get("entries") or []:
        link = _text(e.get("link"))
        if link and "://" not in link:
            link = urljoin(BASE, link)
        out.append(
            _make_entry(
                id=_text(e.get("id")), link=link, title=_text(e.get("title")),
                summary=_text(e.get("description")), content=None,
                published=_utc_from_iso(e.get("published")) or _utc_from_iso(e.get("updated")),
            )
        )
    return ParsedFeed(entries=tuple(out), title=None, ttl_minutes=None, parser="fast")


def _raw_rs(body: bytes) -> ParsedFeed | None:
    import feedparser_rs

    try:
        d = feedparser_rs.parse(body)
        entries = _feedparser_entries(d.get("entries") or ())
    except Exception:
        return None
    fixed = []
    from urllib.parse import urljoin

    for e in entries:
        if e.link and "://" not in e.link:
            from dataclasses import replace

            e = replace(e, link=urljoin(BASE, e.link))
        fixed.append(e)
    return ParsedFeed(entries=tuple(fixed), title=None, ttl_minutes=None, parser="rs")


def _shipped(body: bytes) -> Key | None:
    try:
        return _key(parse_document(body, url=BASE))
    except FeedParseError:
        return None


def _eligible_fast(body: bytes) -> ParsedFeed | None:
    try:
        precheck(body)
    except FeedParseError:
        return None
    if not fast_path_eligible(body, None):
        return None
    return _parse_fast(body, url=BASE)


def _time(fn: Callable[[bytes], Any], docs: list[bytes], repeat: int) -> float:
    t0 = time.perf_counter()
    for _ in range(repeat):
        for d in docs:
            fn(d)
    return (time.perf_counter() - t0) / (repeat * len(docs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parents[3] / "shared" / "corpus")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[2] / "docs" / "parser-agreement.md")
    args = ap.parse_args()

    files = sorted(
        p for p in args.corpus.rglob("*")
        if p.is_file() and p.suffix in {".xml", ".rss", ".atom", ".json", ".html"}
    )
    stats: dict[str, Counter[str]] = {"fastfeedparser": Counter(), "feedparser-rs": Counter()}
    eligible = Counter[str]()
    shipped = Counter[str]()
    disagreements: list[str] = []
    by_dir: dict[str, Counter[str]] = {}
    for path in files:
        body = path.read_bytes()
        ref = _reference(body)
        group = "/".join(path.relative_to(args.corpus).parts[:3])
        for name, fn in (("fastfeedparser", _raw_fast), ("feedparser-rs", _raw_rs)):
            got = _key(fn(body))
            if ref is None:
                stats[name]["reference-no-feed"] += 1
            elif got is None:
                stats[name]["fast-failed"] += 1
            elif got == ref:
                stats[name]["agree"] += 1
            else:
                stats[name]["disagree"] += 1
                if name == "fastfeedparser":
                    by_dir.setdefault(group, Counter())["disagree"] += 1
        fast = _eligible_fast(body)
        if fast is not None and ref is not None:
            if _key(fast) == ref:
                eligible["agree"] += 1
            else:
                eligible["disagree"] += 1
                disagreements.append(str(path.relative_to(args.corpus)))
        elif fast is not None:
            eligible["reference-no-feed"] += 1
        else:
            eligible["sent-to-feedparser"] += 1
        if _is_json_feed(body):
            shipped["json"] += 1  # no reference: feedparser 6 cannot read JSON Feed
            continue
        got = _shipped(body)
        shipped["agree" if got == ref else "disagree"] += 1

    # Timing on a typical document: the 20-entry RSS 2.0 the benchmarks serve.
    doc = make_rss("http://example.test/", 0, 20)
    import feedparser
    import feedparser_rs

    timings = {
        "feedparser (reference)": _time(lambda b: feedparser.parse(io.BytesIO(b)), [doc], 50),
        "feedparser-rs (raw)": _time(feedparser_rs.parse, [doc], 500),
        "fastfeedparser (raw)": _time(lambda b: _raw_fast(b), [doc], 500),
        "hot path `parse_document` (fast, with checks and Entry building)": _time(
            lambda b: parse_document(b, url=BASE), [doc], 500
        ),
        "fallback `parse_with_feedparser` (with Entry building)": _time(
            lambda b: parse_with_feedparser(b, url=BASE), [doc], 50
        ),
    }

    lines = [
        "# Parser agreement with feedparser",
        "",
        "Generated by `.venv/bin/python benchmarks/machinery/parser_agreement.py` "
        f"on {platform.node()} ({platform.python_version()}), {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"Corpus: {len(files)} documents under `../shared/corpus` (feedparser's test suite: "
        "well-formed, ill-formed, encodings, entities; reader's test feeds).",
        "",
        "Compared per document: the tuple of (identity, link, title, date in UTC) of every entry, "
        "in document order, through the feed layer's own adapters (identity = id/guid, else link, "
        "else hash). A document agrees only if every entry agrees. 'reference-no-feed' means "
        "feedparser itself found no feed (the document is a typed parse error for us).",
        "",
        "## Raw agreement on the whole corpus",
        "",
        "| parser | agree | disagree | fast parser failed | reference found no feed |",
        "|---|---|---|---|---|",
    ]
    for name, c in stats.items():
        lines.append(
            f"| {name} | {c['agree']} | {c['disagree']} | {c['fast-failed']} | {c['reference-no-feed']} |"
        )
    lines += [
        "",
        "Where fastfeedparser disagrees (corpus folder: documents):",
        "",
        ", ".join(f"`{g}`: {c['disagree']}" for g, c in sorted(by_dir.items(), key=lambda kv: -kv[1]["disagree"])[:25]),
        "",
        "## The hot path's rule",
        "",
        "`fast_path_eligible` sends a document to fastfeedparser only if it is UTF-8 (declared "
        "or undeclared-and-valid, no other charset in Content-Type), has no DOCTYPE, its root "
        "is `<rss version=\"2.0\">` or an Atom 1.0 `<feed>`, it has no bare `&` (not "
        "well-formed: parsers recover differently) and no Atom title of type html/xhtml/base64 "
        "(feedparser sanitises and decodes those). The fast result is then used only if it has "
        "exactly as many entries as the document has `<item>`/`<entry>` tags, every Atom entry "
        "has an `<id>` (fastfeedparser invents one), no entry relies on an id-as-link that "
        "`isPermaLink=\"false\"` might forbid, and no entry needs the hash identity (which "
        "covers the summary, whose text depends on feedparser's sanitiser). Everything else "
        "goes to feedparser.",
        "",
        f"- eligible and agreeing: {eligible['agree']}",
        f"- eligible but disagreeing: {eligible['disagree']}",
        f"- eligible, reference found no feed: {eligible['reference-no-feed']}",
        f"- sent to feedparser: {eligible['sent-to-feedparser']}",
        "",
    ]
    if disagreements:
        lines += ["Eligible documents that still disagree:", ""]
        lines += [f"- `{d}`" for d in disagreements[:40]]
        lines.append("")
    typical = make_rss("http://example.test/", 0, 20)
    ref_typical = _reference(typical)
    lines += [
        "## Why fastfeedparser rather than feedparser-rs",
        "",
        "feedparser-rs agrees on slightly more corpus documents, but on the typical document "
        "the benchmarks serve (RSS 2.0 titles containing `&amp;`) it returns the title still "
        "escaped (`&amp;`), so every entry disagrees: "
        f"feedparser-rs agrees {_key(_raw_rs(typical)) == ref_typical}, "
        f"fastfeedparser agrees {_key(_raw_fast(typical)) == ref_typical}. Escaped ampersands in "
        "titles are common in real feeds; the corpus has few of them.",
        "",
        "## JSON Feed",
        "",
        "feedparser 6 does not read JSON Feed, so JSON documents (those declaring a "
        "jsonfeed.org version) go to fastfeedparser with no reference; they are outside the "
        "comparisons above (the corpus's `.json` files count as 'reference found no feed').",
        "",
        "## Shipped pipeline (`parse_document`) vs feedparser",
        "",
        f"- agree: {shipped['agree']} / {shipped['agree'] + shipped['disagree']}",
        f"- disagree: {shipped['disagree']}",
        f"- JSON Feed documents (no reference, not compared): {shipped['json']}",
        "",
        "## Speed on a 20-entry RSS 2.0 document "
        f"({len(doc)} bytes, one core, machine shared with other jobs)",
        "",
        "| parser | ms per document |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v * 1e3:.3f} |" for k, v in timings.items()]
    lines.append("")
    args.out.write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
