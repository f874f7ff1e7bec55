"""WebSub: one row per subscription of a feed at its hub (issue 44).

``feed_id`` deliberately has no foreign key: when a feed is deleted its row stays
(state ``unsubscribing``) until the hub has verified the unsubscription. Nothing to
back-fill; downgrade drops the table (the hubs' leases then lapse by themselves).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28 23:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0009'
down_revision: str | Sequence[str] | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('websub_subscriptions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('feed_id', sa.Integer(), nullable=False),
    sa.Column('hub', sa.Text(), nullable=False),
    sa.Column('topic', sa.Text(), nullable=False),
    sa.Column('callback_id', sa.String(length=64), nullable=False),
    sa.Column('secret', sa.String(length=128), nullable=False),
    sa.Column('state', sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('lease_seconds', sa.Integer(), nullable=True),
    sa.Column('lease_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('requested_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('failures', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('last_notification_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('notifications', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('rejected', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_websub_subscriptions')),
    sa.UniqueConstraint('callback_id', name=op.f('uq_websub_subscriptions_callback_id'))
    )
    op.create_index(op.f('ix_websub_subscriptions_feed_id'), 'websub_subscriptions', ['feed_id'],
                    unique=False)


def downgrade() -> None:
    op.drop_index(op.f('ix_websub_subscriptions_feed_id'), table_name='websub_subscriptions')
    op.drop_table('websub_subscriptions')
