"""The spool's batch rows: every point of one report batch packed into one outbox row.

One SQLite row per point cost the spool writer about 6 µs a point (a b-tree cell, an index
entry and their pages in the WAL), 96 µs of a training step's 10 points on the driver
(docs/BENCHMARKS.md, tracking overhead). A batch row holds a whole batch in one ``data``
blob and reserves one sequence number per point (the row's ``seq`` is its last point's, the
``n`` points end there), so a point keeps its own seq: the drainer marks what MLflow took
per point, and a row only part sent is split (:func:`split`).

The blob, little-endian: ``b"EB1"``, a u32 CRC-32 of the rest, a u32 header length, the
header (JSON: the distinct keys, the kinds, the text values), then per point a u32 key
index, an f64 value (0 for a text point), an i64 step (``NO_STEP`` for none) and an i64
timestamp. NaN and infinities survive as f64; the CRC names a damaged blob, which SQLite's
own checks do not see (:class:`BadBatchRow`).
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import Any

MAGIC = b"EB1"
KIND = "points"  # the outbox kind of a batch row
NO_STEP = -(2**63)
_CODES = {"metric": "m", "param": "p", "tag": "t"}
_KINDS = {code: kind for kind, code in _CODES.items()}
_HEAD = struct.Struct("<II")  # CRC-32, header length
_SWAP = sys.byteorder != "little"

#: Points a writer puts in one row: MLflow's per-request limits (1000 metrics, 100 params or
#: tags in one log_batch), so a drain request takes whole rows and a row is never split.
ROW_LIMIT = {"metric": 1000, "param": 100, "tag": 100}

Point = tuple[str, str, Any, "int | None", int]  # (kind, key, value, step, timestamp_ms)


class BadBatchRow(ValueError):
    """A batch row's blob does not decode (wrong magic, CRC, or layout)."""


def encode(points: Sequence[Point]) -> tuple[bytes, int]:
    """Pack (kind, key, value, step, timestamp_ms) points into one row's blob; returns the
    blob and the oldest timestamp (the row's ``ts``: the spool's lag counts from it).

    Raises
    ------
    ValueError
        A kind other than metric, param or tag, or a metric value that is not a number.
    """
    kinds, keys, values, steps, stamps = zip(*points, strict=True)
    if kinds.count("metric") == len(kinds):  # the usual batch: counted in C, not a loop
        return encode_metrics(keys, values, steps, stamps)
    if unknown := set(kinds) - set(_CODES):
        raise ValueError(f"a point's kind must be metric, param or tag, not {unknown}")
    kind_field = "".join(_CODES[k] for k in kinds)
    numbers = [float(v) if k == "metric" else 0.0 for k, v in zip(kinds, values, strict=True)]
    texts = [str(v) for k, v in zip(kinds, values, strict=True) if k != "metric"]
    return _pack(kind_field, keys, numbers, texts, steps, stamps)


def encode_metrics(
    keys: Sequence[str],
    values: Sequence[float],
    steps: Sequence[int | None],
    stamps: Sequence[int],
) -> tuple[bytes, int]:
    """:func:`encode` of metric points given as four columns (the same blob), without a
    tuple per point: the driver's spool writer hands a report batch's columns straight
    here, and every step of the way is a C loop (issue 11: the per-point tuples cost the
    writer 0.3 µs a point).

    Raises
    ------
    ValueError
        A value that is not a number, or columns of different lengths.
    """
    if not len(keys) == len(values) == len(steps) == len(stamps):
        raise ValueError("a batch row's columns must have one entry per point")
    return _pack("m", keys, values, [], steps, stamps)


def _pack(
    kind_field: str,
    keys: Sequence[str],
    numbers: Sequence[Any],
    texts: list[str],
    steps: Sequence[int | None],
    stamps: Sequence[int],
) -> tuple[bytes, int]:
    """The blob of points given as columns (the module doc's layout), and the oldest stamp."""
    # The distinct keys in first-seen order, and each point's index among them, in C.
    index = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    header = json.dumps({"k": list(index), "c": kind_field, "t": texts}).encode()
    columns = [
        array("I", map(index.__getitem__, keys)),
        _column("d", numbers, float),
        _column("q", [NO_STEP if s is None else s for s in steps] if None in steps else steps, int),
        _column("q", stamps, int),
    ]
    if _SWAP:
        for column in columns:
            column.byteswap()
    body = header + b"".join(column.tobytes() for column in columns)
    rest = struct.pack("<I", len(header)) + body
    return MAGIC + struct.pack("<I", zlib.crc32(rest)) + rest, min(stamps)


def _column(code: str, values: Sequence[Any], cast: type) -> array:
    """An array of ``values`` as they are (built in C), or cast one by one when they are
    not already numbers (a string "0.5", a float step)."""
    try:
        return array(code, values)
    except TypeError:
        return array(code, [cast(v) for v in values])


def intact(blob: bytes | None) -> bool:
    """Whether a row's blob has the magic and its CRC matches (no full decode)."""
    if blob is None or len(blob) < 3 + _HEAD.size or bytes(blob[:3]) != MAGIC:
        return False
    return zlib.crc32(blob[7:]) == _HEAD.unpack_from(blob, 3)[0]


def decode(blob: bytes, n: int) -> list[Point]:
    """The ``n`` points of a row's blob, in order.

    Raises
    ------
    BadBatchRow
        The blob is damaged or not a batch row of ``n`` points.
    """
    try:
        return _decode(bytes(blob), n)
    except BadBatchRow:
        raise
    except (ValueError, KeyError, IndexError, TypeError, struct.error) as exc:
        raise BadBatchRow(f"a batch row of {n} points does not decode: {exc}") from None


def _decode(blob: bytes, n: int) -> list[Point]:
    if blob[:3] != MAGIC:
        raise BadBatchRow("not a batch row (wrong magic)")
    crc, header_len = _HEAD.unpack_from(blob, 3)
    if zlib.crc32(blob[7:]) != crc:
        raise BadBatchRow("its CRC does not match (the blob is damaged)")
    start = 3 + _HEAD.size
    header = json.loads(blob[start : start + header_len])
    columns = []
    offset = start + header_len
    for code, width in (("I", 4), ("d", 8), ("q", 8), ("q", 8)):
        column = array(code, blob[offset : offset + width * n])
        if _SWAP:
            column.byteswap()
        if len(column) != n:
            raise BadBatchRow(f"it holds fewer than its {n} points")
        columns.append(column)
        offset += width * n
    if offset != len(blob):
        raise BadBatchRow(f"it holds more than its {n} points")
    key_ids, numbers, steps, stamps = columns
    keys, kind_field, texts = header["k"], header["c"], iter(header["t"])
    points = []
    for i in range(n):
        kind = _KINDS[kind_field if len(kind_field) == 1 else kind_field[i]]
        value: Any = numbers[i] if kind == "metric" else next(texts)
        step = steps[i]
        points.append((kind, keys[key_ids[i]], value, None if step == NO_STEP else step, stamps[i]))
    return points


def chunks(points: Sequence[Point]) -> list[Sequence[Point]]:
    """``points`` cut into rows of at most :data:`ROW_LIMIT` (the strictest kind present)."""
    if len(points) <= min(ROW_LIMIT.values()):
        return [points] if points else []  # a report batch: no need to look at the kinds
    kinds = set(next(zip(*points, strict=True)))
    size = min(ROW_LIMIT[k] for k in kinds) if kinds != {"metric"} else ROW_LIMIT["metric"]
    return [points[i : i + size] for i in range(0, len(points), size)]


def split(points: Sequence[Point], marked: Sequence[bool]) -> list[tuple[int, bool, list[Point]]]:
    """Runs of consecutive points alike in ``marked``: (offset, marked, points) each."""
    runs: list[tuple[int, bool, list[Point]]] = []
    for i, (point, flag) in enumerate(zip(points, marked, strict=True)):
        if runs and runs[-1][1] == flag:
            runs[-1][2].append(point)
        else:
            runs.append((i, flag, [point]))
    return runs
