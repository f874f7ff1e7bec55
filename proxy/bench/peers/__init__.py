"""``proxy bench peers`` (issue 47): the proxy beside the real feed readers people run.

Public: ``_run.main`` through the command, :func:`._score.score` and :func:`._score.line` (the one
scorer and the output line), :func:`._peers.get_peer` and :data:`._peers.PEER_NAMES`, and
:mod:`.miniflux` (a replica of Miniflux's schedulers, never listed as a peer).  Nothing is
imported here, so ``proxy --help`` stays fast.
"""
