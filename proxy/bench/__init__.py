"""The live benchmark: the running service against the feed farm, the simulator and plain readers.

Public: :mod:`proxy.bench.metrics` (pure metric computations from a
publication log and probe records), :mod:`proxy.bench.baselines` (plain
feed-reader polling schedules), :mod:`proxy.bench.live` (orchestration of one
live run) and :mod:`proxy.bench.report` (markdown and PNGs). The CLI is
``proxy bench live`` (:mod:`proxy.bench.cli`).
"""
