"""Feed registrations (issue 22): each user's own registration of a shared feed.

Before this revision every user saw, read and could delete every feed, with its
URL (secrets included) and its one shared ping token. Now ``feeds`` is the
shared resource and ``feed_registrations`` holds, per user, the URL as that user
gave it and their own ping token; ``feeds.ping_token`` goes.

Back-fill: every user whose profiles' rules read a feed gets a registration of
it, with the feed's URL and its former ping token (so publishers' pings keep
working; that token was visible to every user, so owners should rotate it with
``POST /api/v1/feeds/{id}/ping-token``). There is no owner column to go by, so a
feed no rule reads gets no registration: nobody can see it, and the service
deletes it on its next start (``Store.collect_unregistered_feeds``).

Downgrade puts one ping token back on each feed (that of its oldest registration,
else a fresh one) and drops the registrations.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01 10:00:00
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = '0002'
down_revision: str | Sequence[str] | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


@contextmanager
def _rebuilding_feeds() -> Iterator[Any]:
    """``batch_alter_table('feeds')`` that keeps what SQLite's table rebuild would lose:
    AUTOINCREMENT, and the high-water mark of handed-out ids (feed ids are shown to users
    and must never be reused, _models.NO_REUSE)."""
    conn = op.get_bind()
    sqlite = conn.dialect.name == 'sqlite'
    seq = None
    if sqlite:
        seq = conn.execute(sa.text("SELECT seq FROM sqlite_sequence WHERE name = 'feeds'")).scalar()
    with op.batch_alter_table(
        'feeds', schema=None, table_kwargs={'sqlite_autoincrement': True}
    ) as batch_op:
        yield batch_op
    if sqlite and seq is not None:
        conn.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = 'feeds'"))
        conn.execute(
            sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES ('feeds', :seq)"),
            {"seq": max(int(seq), int(conn.execute(sa.text("SELECT COALESCE(MAX(id), 0) FROM feeds")).scalar_one()))},
        )


def upgrade() -> None:
    op.create_table('feed_registrations',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('feed_id', sa.Integer(), nullable=False),
    sa.Column('url', sa.Text(), nullable=False),
    sa.Column('ping_token', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['feed_id'], ['feeds.id'], name=op.f('fk_feed_registrations_feed_id_feeds'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], name=op.f('fk_feed_registrations_user_id_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_feed_registrations')),
    sa.UniqueConstraint('user_id', 'feed_id', name='uq_feed_registrations_user_id_feed_id'),
    sqlite_autoincrement=True,
    )
    with op.batch_alter_table('feed_registrations', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_feed_registrations_feed_id'), ['feed_id'], unique=False)

    # One registration per (user, feed) that the user's rules read, ordered so ids follow feeds.
    op.execute(
        """
        INSERT INTO feed_registrations (user_id, feed_id, url, ping_token, created_at)
        SELECT used.user_id, f.id, f.url, f.ping_token, f.created_at
        FROM feeds f
        JOIN (
            SELECT DISTINCT p.user_id AS user_id, rf.feed_id AS feed_id
            FROM rule_feeds rf
            JOIN rules r ON r.id = rf.rule_id
            JOIN profiles p ON p.id = r.profile_id
        ) used ON used.feed_id = f.id
        ORDER BY f.id, used.user_id
        """
    )

    with _rebuilding_feeds() as batch_op:
        batch_op.drop_column('ping_token')


def downgrade() -> None:
    with _rebuilding_feeds() as batch_op:
        batch_op.add_column(sa.Column('ping_token', sa.String(length=64), nullable=True))

    conn = op.get_bind()
    conn.execute(sa.text(
        """
        UPDATE feeds SET ping_token = (
            SELECT r.ping_token FROM feed_registrations r
            WHERE r.feed_id = feeds.id ORDER BY r.id LIMIT 1
        )
        """
    ))
    orphans = conn.execute(sa.text("SELECT id FROM feeds WHERE ping_token IS NULL")).scalars().all()
    for feed_id in orphans:
        conn.execute(
            sa.text("UPDATE feeds SET ping_token = :token WHERE id = :id"),
            {"token": secrets.token_urlsafe(24), "id": feed_id},
        )

    with _rebuilding_feeds() as batch_op:
        batch_op.alter_column('ping_token', existing_type=sa.String(length=64), nullable=False)

    with op.batch_alter_table('feed_registrations', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_feed_registrations_feed_id'))

    op.drop_table('feed_registrations')
