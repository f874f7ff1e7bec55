"""What matched is told (issue 43): ``ceis.matched`` keeps the entries that made a CEI fire.

A JSON list, one object per entry (feed id, title, link, published, and what
matched: ``kind``, ``field``, ``text``), at most 20; NULL when nothing was told.
The store writes it with the operation that fires the CEI (a trigger's query
EIs joining, an alert's seal, a watch rule's update), in the same transaction;
the CEI API view and the notification document (version 2) read it back.

Nothing to back-fill: what matched was never kept before, so CEIs fired earlier
read NULL (an empty ``matched`` in the API). Downgrade drops the column.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 02:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0010'
down_revision: str | Sequence[str] | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('ceis') as batch:
        batch.add_column(sa.Column('matched', sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('ceis') as batch:
        batch.drop_column('matched')
