"""Feed monitoring proxy: budget-limited polling of RSS/Atom feeds for complex user profiles."""

__version__ = "0.1.0"
