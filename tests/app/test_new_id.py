"""``new_id``: the prefix and a version-4 UUID's hex digits, as ``uuid.uuid4().hex``."""

from __future__ import annotations

import re
import uuid

from app.db.base import new_id


def test_new_ids_are_version_4_uuids_after_their_prefix() -> None:
    seen = set()
    for _ in range(2000):
        got = new_id("sess")
        assert re.fullmatch(r"sess_[0-9a-f]{32}", got)
        u = uuid.UUID(got[5:])
        assert u.version == 4 and u.variant == uuid.RFC_4122 and u.hex == got[5:]
        seen.add(got)
    assert len(seen) == 2000


def test_every_random_bit_outside_version_and_variant_varies() -> None:
    ones, zeros = 0, (1 << 128) - 1
    for _ in range(500):
        value = uuid.UUID(new_id("r")[2:]).int
        ones |= value
        zeros &= value
    fixed = (0xF << 76) | (0x3 << 62)  # the version nibble, the variant's two bits
    assert ones & ~fixed == ((1 << 128) - 1) & ~fixed  # each free bit seen as 1
    assert zeros & ~fixed == 0  # and as 0
    assert ones & fixed == zeros & fixed == (4 << 76) | (0x2 << 62)
