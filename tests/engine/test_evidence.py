"""Evidence rows as the engines bring them back (eoctl.engine.evidence): JSON's types, and no
secret a value carries, at any depth."""

from __future__ import annotations

import datetime as dt
import json

from eoctl.engine.evidence import masked_jsonable
from eoctl.secrets import MASK, mask_text


def test_every_string_is_masked_at_any_depth_and_the_rest_becomes_json() -> None:
    naive = dt.datetime(2026, 11, 28, 6, 0, 0)
    aware = dt.datetime(2026, 11, 28, 7, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    row = {
        "message_id": "m-1",
        "password=keyNotMasked": "password=top1",  # a key is a column name, never masked
        "headers": [{"key": "eo-token-id", "value": "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ9.deep2"}],
        "tuple": ("jdbc:postgresql://db/orders?user=eoctl&password=tup3&ssl=true", 4),
        "at": naive, "aware": aware, "raw": b"\x00\xff", "offset": 12, "ratio": 0.5, "missing": None,
        "processed": True,
    }
    out = masked_jsonable(row)
    text = json.dumps(out)
    for secret in ("top1", "deep2", "tup3"):
        assert secret not in text
    assert out["password=keyNotMasked"] == f"password={MASK}"
    assert out["headers"][0]["key"] == "eo-token-id" and out["tuple"][1] == 4
    assert out["message_id"] == "m-1" and out["offset"] == 12 and out["ratio"] == 0.5
    assert out["missing"] is None and out["processed"] is True
    # times always carry their offset (a naive one is UTC); bytes are hex
    assert out["at"] == "2026-11-28T06:00:00+00:00" and out["aware"] == "2026-11-28T07:00:00+01:00"
    assert out["raw"] == "00ff"
    # what the masking leaves is stable: a report read back and masked again is the same
    assert masked_jsonable(out) == out == json.loads(text)
    assert all(mask_text(v) == v for v in (out["at"], out["aware"], out["raw"]))
