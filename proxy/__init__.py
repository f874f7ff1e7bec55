"""Feed monitoring proxy: budget-limited polling of RSS/Atom feeds for complex user profiles."""

__version__ = "0.1.0"

#: Where people whose feeds the proxy polls learn what it is (the default User-Agent names it).
PROJECT_URL = "https://pypi.org/project/feed-monitoring-proxy/"

# Name, version and a URL (RFC 9110 §10.1.5: feed hosts read it to tell who polls them).
# Operators set their own contact with PROXY_USER_AGENT.
DEFAULT_USER_AGENT = (
    f"feed-monitoring-proxy/{__version__} (+{PROJECT_URL}; RSS/Atom monitoring proxy; "
    "conditional GET; honours Retry-After)"
)
