"""Runs lemon24/reader's scheduled updates for ``proxy bench peers``; executed by reader's own venv.

Usage: ``python reader_driver.py DB INTERVAL_MINUTES URL...`` (under ``faketime``).
reader decides which feeds are due (``update_feeds(scheduled=True)``: each feed's
``update_after``, on interval boundaries, later after Retry-After / Cache-Control);
this loop only wakes it once a (fake) minute, as its documentation's
``reader update --scheduled`` from cron every minute would.  It imports nothing of
the proxy: it runs on reader's Python (>= 3.12), not the project's.
"""

import sys
import time

from reader import make_reader  # type: ignore[import-not-found,unused-ignore]


def main() -> None:
    db, interval, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    r = make_reader(db)
    r.set_tag((), ".reader.update", {"interval": interval, "jitter": 0})
    for url in urls:
        r.add_feed(url, exist_ok=True)
    print("ready", flush=True)
    while True:
        for result in r.update_feeds_iter(scheduled=True, workers=1):
            if isinstance(result.value, Exception):
                print(f"update error: {result.url}: {result.value}", file=sys.stderr, flush=True)
        # Wake just after the next minute boundary (reader's intervals are whole minutes).
        time.sleep(60 - time.time() % 60 + 0.5)


if __name__ == "__main__":
    main()
