"""Cluster (issue 21): the live processes of a scaled-out deployment, one row each.

Every ``proxy serve --role …`` process upserts its row (role, host, port,
whether it leads the chronon loop and with which lease epoch) at each
heartbeat; ``GET /api/v1/cluster`` lists the rows whose heartbeat is recent.
Nothing to back-fill; downgrade drops the table (heartbeats are transient).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-25 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0007'
down_revision: str | Sequence[str] | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('cluster_processes',
    sa.Column('id', sa.String(length=200), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('host', sa.String(length=255), nullable=False),
    sa.Column('port', sa.Integer(), nullable=False),
    sa.Column('leads', sa.Boolean(), server_default=sa.false(), nullable=False),
    sa.Column('epoch', sa.BigInteger(), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('heartbeat_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cluster_processes'))
    )
    op.create_index('ix_cluster_processes_heartbeat_at', 'cluster_processes', ['heartbeat_at'],
                    unique=False)


def downgrade() -> None:
    op.drop_index('ix_cluster_processes_heartbeat_at', table_name='cluster_processes')
    op.drop_table('cluster_processes')
