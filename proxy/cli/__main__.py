"""``python -m proxy.cli …``: the same as the ``proxy`` console script."""

from proxy.cli import main

main()
