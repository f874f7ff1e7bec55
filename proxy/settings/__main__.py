"""`python -m proxy.settings` prints the table for docs/configuration.md."""

from proxy.settings import settings_table_markdown

print(settings_table_markdown(), end="")
