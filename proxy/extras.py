"""Optional dependencies: what the ``sim`` extra brings, and the message when one is missing.

``scipy`` (the exact optimum), ``matplotlib`` (figures) and ``tqdm`` (progress
bars) serve only the simulator, the experiments and the benchmark reports, so
the service's image goes without them (``pyproject.toml``, extra ``sim``). The
commands that need them import them inside the command; the ``proxy`` entry
point turns the resulting :class:`ModuleNotFoundError` into one line naming the
extra (:func:`missing_extra_message`) instead of a traceback.
"""

from __future__ import annotations

__all__ = ["SIM_INSTALL", "SIM_MODULES", "missing_extra_message"]

#: Top-level modules that only the `sim` extra installs.
SIM_MODULES = frozenset({"scipy", "matplotlib", "tqdm"})
SIM_INSTALL = "pip install 'feed-monitoring-proxy[sim]'"


def missing_extra_message(exc: BaseException) -> str | None:
    """What to tell the user when ``exc`` is a missing module of the ``sim`` extra (else ``None``)."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    module = exc.name.split(".", 1)[0]
    if module not in SIM_MODULES:
        return None
    return (f"this command needs {module}, which comes with the 'sim' extra "
            f"(simulator, experiments, reports): {SIM_INSTALL}")
