"""Initial schema: users, API keys, feeds, profiles, rules, CEIs/EIs, probes, entries, metrics.

See ``proxy/store/_models.py`` for what each table is for.

Revision ID: 0001
Revises:
Create Date: 2026-11-22 12:28:27
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0001'
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:

    op.create_table('chronon_metrics',
    sa.Column('chronon', sa.Integer(), autoincrement=False, nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('budget', sa.Integer(), nullable=False),
    sa.Column('used', sa.Integer(), nullable=False),
    sa.Column('captured_ceis', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('missed_ceis', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('tick_jitter_seconds', sa.Float(), nullable=True),
    sa.PrimaryKeyConstraint('chronon', name=op.f('pk_chronon_metrics'))
    )
    op.create_table('feeds',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('url_normalised', sa.String(length=2048), nullable=False),
    sa.Column('resource', sa.Integer(), nullable=False),
    sa.Column('ping_token', sa.String(length=64), nullable=False),
    sa.Column('etag', sa.Text(), nullable=True),
    sa.Column('last_modified', sa.String(length=64), nullable=True),
    sa.Column('last_probe_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_outcome', sa.String(length=32), nullable=True),
    sa.Column('consecutive_errors', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_allowed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('disabled', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('disabled_reason', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_feeds')),
    sa.UniqueConstraint('resource', name=op.f('uq_feeds_resource')),
    sa.UniqueConstraint('url_normalised', name=op.f('uq_feeds_url_normalised')),
    sqlite_autoincrement=True,
    )
    op.create_table('service_state',
    sa.Column('key', sa.String(length=100), nullable=False),
    sa.Column('value', sa.JSON(), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_service_state'))
    )
    op.create_table('users',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_users')),
    sa.UniqueConstraint('name', name=op.f('uq_users_name')),
    sqlite_autoincrement=True,
    )
    op.create_table('api_keys',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('key_hash', sa.String(length=64), nullable=False),
    sa.Column('prefix', sa.String(length=16), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_api_keys_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_api_keys')),
    sa.UniqueConstraint('key_hash', name=op.f('uq_api_keys_key_hash')),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_api_keys_user_id'), ['user_id'], unique=False)

    op.create_table('probes',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('feed_id', sa.Integer(), nullable=False),
    sa.Column('chronon', sa.Integer(), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('duration_seconds', sa.Float(), nullable=True),
    sa.Column('outcome', sa.String(length=32), nullable=False),
    sa.Column('http_status', sa.Integer(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('new_entries', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('bytes', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['feed_id'], ['feeds.id'], name=op.f('fk_probes_feed_id_feeds'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_probes')),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('probes', schema=None) as batch_op:
        batch_op.create_index('ix_probes_feed_id_started_at', ['feed_id', 'started_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_probes_started_at'), ['started_at'], unique=False)

    op.create_table('profiles',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_profiles_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_profiles')),
    sa.UniqueConstraint('user_id', 'name', name='uq_profiles_user_id_name'),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('profiles', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_profiles_user_id'), ['user_id'], unique=False)

    op.create_table('entries',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('feed_id', sa.Integer(), nullable=False),
    sa.Column('identity', sa.String(length=1024), nullable=False),
    sa.Column('title', sa.Text(), nullable=True),
    sa.Column('link', sa.Text(), nullable=True),
    sa.Column('published', sa.DateTime(timezone=True), nullable=True),
    sa.Column('summary', sa.Text(), nullable=True),
    sa.Column('first_seen_probe_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.Column('first_seen_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['feed_id'], ['feeds.id'], name=op.f('fk_entries_feed_id_feeds'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['first_seen_probe_id'], ['probes.id'], name=op.f('fk_entries_first_seen_probe_id_probes'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_entries')),
    sa.UniqueConstraint('feed_id', 'identity', name='uq_entries_feed_id_identity'),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('entries', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_entries_first_seen_at'), ['first_seen_at'], unique=False)
        batch_op.create_index(batch_op.f('ix_entries_first_seen_probe_id'), ['first_seen_probe_id'], unique=False)

    op.create_table('rules',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('profile_id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('spec', sa.JSON(), nullable=False),
    sa.Column('state', sa.JSON(), nullable=True),
    sa.ForeignKeyConstraint(['profile_id'], ['profiles.id'], name=op.f('fk_rules_profile_id_profiles'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_rules')),
    sa.UniqueConstraint('profile_id', 'position', name='uq_rules_profile_id_position'),
    sqlite_autoincrement=True,
    )
    op.create_table('ceis',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('profile_id', sa.Integer(), nullable=False),
    sa.Column('rule_id', sa.Integer(), nullable=True),
    sa.Column('release', sa.Integer(), nullable=False),
    sa.Column('sealed', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('state', sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('resolved_chronon', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.CheckConstraint("state IN ('pending', 'captured', 'missed')", name=op.f('ck_ceis_state_valid')),
    sa.ForeignKeyConstraint(['profile_id'], ['profiles.id'], name=op.f('fk_ceis_profile_id_profiles'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['rule_id'], ['rules.id'], name=op.f('fk_ceis_rule_id_rules'), ondelete='SET NULL'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ceis'))
    )
    with op.batch_alter_table('ceis', schema=None) as batch_op:
        batch_op.create_index('ix_ceis_profile_id_state', ['profile_id', 'state'], unique=False)
        batch_op.create_index(batch_op.f('ix_ceis_rule_id'), ['rule_id'], unique=False)

    op.create_table('rule_feeds',
    sa.Column('rule_id', sa.Integer(), nullable=False),
    sa.Column('feed_id', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['feed_id'], ['feeds.id'], name=op.f('fk_rule_feeds_feed_id_feeds'), ondelete='RESTRICT'),
    sa.ForeignKeyConstraint(['rule_id'], ['rules.id'], name=op.f('fk_rule_feeds_rule_id_rules'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('rule_id', 'feed_id', name=op.f('pk_rule_feeds'))
    )
    with op.batch_alter_table('rule_feeds', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_rule_feeds_feed_id'), ['feed_id'], unique=False)

    op.create_table('eis',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('cei_id', sa.String(length=64), nullable=False),
    sa.Column('ordinal', sa.Integer(), nullable=False),
    sa.Column('feed_id', sa.Integer(), nullable=False),
    sa.Column('start', sa.Integer(), nullable=False),
    sa.Column('finish', sa.Integer(), nullable=False),
    sa.Column('reveal', sa.Integer(), nullable=True),
    sa.Column('state', sa.String(length=16), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('captured_chronon', sa.Integer(), nullable=True),
    sa.Column('captured_probe_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=True),
    sa.CheckConstraint("state IN ('pending', 'captured', 'missed')", name=op.f('ck_eis_state_valid')),
    sa.ForeignKeyConstraint(['captured_probe_id'], ['probes.id'], name=op.f('fk_eis_captured_probe_id_probes'), ondelete='SET NULL'),
    sa.ForeignKeyConstraint(['cei_id'], ['ceis.id'], name=op.f('fk_eis_cei_id_ceis'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['feed_id'], ['feeds.id'], name=op.f('fk_eis_feed_id_feeds'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_eis')),
    sa.UniqueConstraint('cei_id', 'ordinal', name='uq_eis_cei_id_ordinal'),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('eis', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_eis_feed_id'), ['feed_id'], unique=False)

    op.create_table('captures',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('ei_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('probe_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('chronon', sa.Integer(), nullable=False),
    sa.ForeignKeyConstraint(['ei_id'], ['eis.id'], name=op.f('fk_captures_ei_id_eis'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['probe_id'], ['probes.id'], name=op.f('fk_captures_probe_id_probes'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_captures')),
    sa.UniqueConstraint('ei_id', name=op.f('uq_captures_ei_id')),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('captures', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_captures_probe_id'), ['probe_id'], unique=False)




def downgrade() -> None:

    with op.batch_alter_table('captures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_captures_probe_id'))

    op.drop_table('captures')
    with op.batch_alter_table('eis', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_eis_feed_id'))

    op.drop_table('eis')
    with op.batch_alter_table('rule_feeds', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_rule_feeds_feed_id'))

    op.drop_table('rule_feeds')
    with op.batch_alter_table('ceis', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ceis_rule_id'))
        batch_op.drop_index('ix_ceis_profile_id_state')

    op.drop_table('ceis')
    op.drop_table('rules')
    with op.batch_alter_table('entries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_entries_first_seen_probe_id'))
        batch_op.drop_index(batch_op.f('ix_entries_first_seen_at'))

    op.drop_table('entries')
    with op.batch_alter_table('profiles', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_profiles_user_id'))

    op.drop_table('profiles')
    with op.batch_alter_table('probes', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_probes_started_at'))
        batch_op.drop_index('ix_probes_feed_id_started_at')

    op.drop_table('probes')
    with op.batch_alter_table('api_keys', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_api_keys_user_id'))

    op.drop_table('api_keys')
    op.drop_table('users')
    op.drop_table('service_state')
    op.drop_table('feeds')
    op.drop_table('chronon_metrics')

