"""Indexes for the API's keyset pagination (issues 23 and 24).

``ceis (profile_id, release, id)``: a profile's CEIs newest first, one page after
another, without sorting the profile's whole history; ``notification_events
(profile_id, id)``: a profile's resolutions in the order they happened (``?after=``).
Nothing to back-fill; downgrade drops the two indexes.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = '0006'
down_revision: str | Sequence[str] | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index('ix_ceis_profile_id_release_id', 'ceis', ['profile_id', 'release', 'id'])
    op.create_index('ix_notification_events_profile_id_id', 'notification_events',
                    ['profile_id', 'id'])


def downgrade() -> None:
    op.drop_index('ix_notification_events_profile_id_id', table_name='notification_events')
    op.drop_index('ix_ceis_profile_id_release_id', table_name='ceis')
