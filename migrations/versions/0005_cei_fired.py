"""Fired or not (issue 23): ``ceis.fired`` says whether the CEI's rule condition held.

A trigger rule's CEI fires when its condition holds on the trigger probe's new
entries and its query EIs join; a CEI whose trigger was only checked stays
``false`` (captured at rank 1 for the scheduling model, but nothing happened
that the user asked about). A watch rule's CEIs are built from updates: fired.

Back-fill: a CEI with more than one EI fired (query EIs joined it, or it
watches several feeds). A single-feed watch rule's past CEIs read ``false``:
telling them apart needs the rule's JSON spec, whose SQL differs per backend.
Downgrade drops the column.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 13:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0005'
down_revision: str | Sequence[str] | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('ceis') as batch:
        batch.add_column(sa.Column('fired', sa.Boolean(), server_default=sa.false(), nullable=False))
    op.execute(
        "UPDATE ceis SET fired = TRUE WHERE (SELECT count(*) FROM eis WHERE eis.cei_id = ceis.id) > 1"
    )


def downgrade() -> None:
    with op.batch_alter_table('ceis') as batch:
        batch.drop_column('fired')
