"""Delivery (issue 19): notify targets, their subscriptions, the outbox of events and deliveries.

``notify_targets`` are a user's webhook / Apprise endpoints (a webhook's
Standard Webhooks secret, and the previous one during a rotation's overlap);
``notify_subscriptions`` say which targets a profile's rules notify and for
which events; ``notification_events`` holds one rendered document per resolved
CEI (its id is the SSE event id) and ``deliveries`` one row per (event,
target), written in the same transaction as the CEI's resolution.
``profiles.notify`` keeps the profile's default targets as submitted.

Nothing to back-fill: existing profiles notify nobody until they name targets.
Downgrade drops the tables (undelivered notifications are lost with them).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004'
down_revision: str | Sequence[str] | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('notify_targets',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('url_hash', sa.String(length=64), nullable=False),
    sa.Column('secret', sa.String(length=100), nullable=True),
    sa.Column('previous_secret', sa.String(length=100), nullable=True),
    sa.Column('previous_secret_expires_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('disabled', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('disabled_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("kind IN ('webhook', 'apprise')", name=op.f('ck_notify_targets_kind_valid')),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_notify_targets_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notify_targets')),
    sa.UniqueConstraint('user_id', 'kind', 'url_hash', name='uq_notify_targets_user_id_kind_url_hash'),
    sqlite_autoincrement=True
    )
    op.create_table('notification_events',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('profile_id', sa.Integer(), nullable=False),
    sa.Column('cei_id', sa.String(length=64), nullable=False),
    sa.Column('type', sa.String(length=16), nullable=False),
    sa.Column('payload', sa.Text(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("type IN ('captured', 'missed')", name=op.f('ck_notification_events_type_valid')),
    sa.ForeignKeyConstraint(['profile_id'], ['profiles.id'], name=op.f('fk_notification_events_profile_id_profiles'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_notification_events_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notification_events')),
    sa.UniqueConstraint('cei_id', name=op.f('uq_notification_events_cei_id')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('notification_events', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notification_events_profile_id'), ['profile_id'], unique=False)
        batch_op.create_index('ix_notification_events_user_id_id', ['user_id', 'id'], unique=False)

    op.create_table('deliveries',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('event_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('target_id', sa.Integer(), nullable=False),
    sa.Column('msg_id', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('window_start', sa.DateTime(timezone=True), nullable=False),
    sa.Column('last_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_status', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('pending', 'delivered', 'failed')", name=op.f('ck_deliveries_state_valid')),
    sa.ForeignKeyConstraint(['event_id'], ['notification_events.id'], name=op.f('fk_deliveries_event_id_notification_events'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['target_id'], ['notify_targets.id'], name=op.f('fk_deliveries_target_id_notify_targets'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_deliveries')),
    sa.UniqueConstraint('event_id', 'target_id', name='uq_deliveries_event_id_target_id'),
    sa.UniqueConstraint('msg_id', name=op.f('uq_deliveries_msg_id')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_deliveries_state_next_attempt_at', ['state', 'next_attempt_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_deliveries_target_id'), ['target_id'], unique=False)

    op.create_table('notify_subscriptions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('profile_id', sa.Integer(), nullable=False),
    sa.Column('rule_id', sa.Integer(), nullable=True),
    sa.Column('target_id', sa.Integer(), nullable=False),
    sa.Column('events', sa.String(length=32), nullable=False),
    sa.ForeignKeyConstraint(['profile_id'], ['profiles.id'], name=op.f('fk_notify_subscriptions_profile_id_profiles'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['rule_id'], ['rules.id'], name=op.f('fk_notify_subscriptions_rule_id_rules'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['target_id'], ['notify_targets.id'], name=op.f('fk_notify_subscriptions_target_id_notify_targets'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notify_subscriptions')),
    sqlite_autoincrement=True
    )
    with op.batch_alter_table('notify_subscriptions', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_notify_subscriptions_profile_id'), ['profile_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_notify_subscriptions_rule_id'), ['rule_id'], unique=False)
        batch_op.create_index(batch_op.f('ix_notify_subscriptions_target_id'), ['target_id'], unique=False)

    with op.batch_alter_table('profiles', schema=None) as batch_op:
        batch_op.add_column(sa.Column('notify', sa.JSON(), nullable=True))



def downgrade() -> None:
    with op.batch_alter_table('profiles', schema=None) as batch_op:
        batch_op.drop_column('notify')

    with op.batch_alter_table('notify_subscriptions', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_notify_subscriptions_target_id'))
        batch_op.drop_index(batch_op.f('ix_notify_subscriptions_rule_id'))
        batch_op.drop_index(batch_op.f('ix_notify_subscriptions_profile_id'))

    op.drop_table('notify_subscriptions')
    with op.batch_alter_table('deliveries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_deliveries_target_id'))
        batch_op.drop_index('ix_deliveries_state_next_attempt_at')

    op.drop_table('deliveries')
    with op.batch_alter_table('notification_events', schema=None) as batch_op:
        batch_op.drop_index('ix_notification_events_user_id_id')
        batch_op.drop_index(batch_op.f('ix_notification_events_profile_id'))

    op.drop_table('notification_events')
    op.drop_table('notify_targets')
