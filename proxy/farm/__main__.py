"""``python -m proxy.farm serve …``: the farm's command line without the proxy's other commands."""

from proxy.farm.cli import farm_app

farm_app()
