"""Leases: which process runs the chronon loop (issue 22).

One row per named lease; ``epoch`` grows by one at every acquisition so a
later fencing step can refuse a stale leader's writes. See
``proxy/store/_lease.py``.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003'
down_revision: str | Sequence[str] | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('leases',
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('holder', sa.String(length=200), nullable=True),
    sa.Column('epoch', sa.BigInteger(), nullable=False),
    sa.Column('acquired_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('renewed_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_leases'))
    )


def downgrade() -> None:
    op.drop_table('leases')
