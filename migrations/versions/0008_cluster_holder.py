"""Cluster: each process's row names its holder id in the ``leases`` table.

``GET /api/v1/cluster`` now says who leads from the ``chronon-loop`` lease row
(holder, live) instead of each process's own claim: a leader killed with
SIGKILL never clears its claim, and was listed as leading beside its successor
until its row aged out. The heartbeat writes ``holder`` (the name the process
campaigns under); the listing marks the row whose holder the live lease names.
Nullable, nothing to back-fill: rows of processes started before this upgrade
fall back to their claimed epoch, compared with the lease's. Downgrade drops
the column.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 22:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0008'
down_revision: str | Sequence[str] | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column('cluster_processes', sa.Column('holder', sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('cluster_processes') as batch:
        batch.drop_column('holder')
