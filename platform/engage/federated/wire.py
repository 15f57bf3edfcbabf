"""The update wire format: a canonical JSON header and raw little-endian float32 tensors.

A message is ``MAGIC | u32 header length | header | payload``. The header declares every
tensor (name, shape, dtype), the payload's SHA-256, the sender, the round, a nonce, the
run's session id and the signature; the payload is the tensors' bytes concatenated in
declared order. Nothing is pickled: a receiver parses JSON and reads float32 bytes, with
size limits checked before either. The header must be byte-for-byte canonical (sorted keys, no spaces, ASCII), so a
changed byte anywhere in it is either malformed or changes what the signature covers.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

MAGIC = b"EFL1"
MAX_HEADER_BYTES = 256 * 1024
MAX_TENSORS = 4096
DTYPE = "float32"
_LE_F32 = np.dtype("<f4")
_PREFIX = struct.Struct("<4sI")
CLIENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
_TENSOR_NAME = re.compile(r"^[A-Za-z0-9_.]{1,200}$")
_HEX = re.compile(r"^[0-9a-f]+$")
_KEYS = {
    "kind",
    "client",
    "round",
    "nonce",
    "num_samples",
    "schema",
    "payload_sha256",
    "scheme",
    "session",
}
#: The session of messages built without one (tests, tools); a job's server draws its own,
#: so an update signed in one run never verifies in another even with the same keys.
NO_SESSION = "0" * 32
SIGNED_DOMAIN = b"engage-fl-update-v1\x00"


class WireError(ValueError):
    """A message that does not parse; ``reason`` is ``malformed`` or ``oversized``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(reason, detail)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class TensorSpec:
    """One declared tensor: its name, shape and dtype (always float32)."""

    name: str
    shape: tuple[int, ...]
    dtype: str = DTYPE

    @property
    def size(self) -> int:
        """The number of values in the tensor."""
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1


@dataclass(frozen=True)
class Schema:
    """The tensors of a model, in order: what every update must declare exactly."""

    tensors: tuple[TensorSpec, ...]

    @classmethod
    def of(cls, state: dict[str, Any]) -> Schema:
        """The schema of a ``state_dict``-like mapping of arrays or tensors."""
        return cls(tuple(TensorSpec(k, tuple(int(d) for d in v.shape)) for k, v in state.items()))

    @property
    def size(self) -> int:
        """The number of values over every tensor."""
        return sum(t.size for t in self.tensors)

    @property
    def nbytes(self) -> int:
        """The payload size the schema declares, in bytes."""
        return 4 * self.size

    def to_json(self) -> list[dict[str, Any]]:
        """The schema as the header's JSON list."""
        return [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.tensors]

    def split(self, vector: np.ndarray) -> dict[str, np.ndarray]:
        """The flat ``vector`` cut back into named tensors of their declared shapes."""
        out, at = {}, 0
        for t in self.tensors:
            out[t.name] = vector[at : at + t.size].reshape(t.shape)
            at += t.size
        return out


@dataclass(frozen=True)
class Header:
    """A parsed, validated header. ``signature`` is None for an unsigned message."""

    kind: str
    client: str
    round: int
    nonce: str
    num_samples: int
    schema: Schema
    payload_sha256: str
    scheme: str
    signature: str | None
    session: str = NO_SESSION

    def signed_bytes(self) -> bytes:
        """What a signature covers: every header field but the signature itself."""
        return SIGNED_DOMAIN + canonical(self._fields())

    def _fields(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "client": self.client,
            "round": self.round,
            "nonce": self.nonce,
            "num_samples": self.num_samples,
            "schema": self.schema.to_json(),
            "payload_sha256": self.payload_sha256,
            "scheme": self.scheme,
            "session": self.session,
        }

    def to_json(self) -> dict[str, Any]:
        """Every field, the signature included (what :func:`pack` writes)."""
        return {**self._fields(), "signature": self.signature}


def canonical(obj: Any) -> bytes:
    """The canonical JSON bytes of ``obj``: sorted keys, no spaces, ASCII, no NaN."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode("ascii")


def to_payload(vector: np.ndarray) -> bytes:
    """``vector`` as little-endian float32 bytes."""
    return np.ascontiguousarray(vector, dtype=_LE_F32).tobytes()


def from_payload(payload: bytes) -> np.ndarray:
    """The float32 vector of a payload (a copy, native byte order)."""
    return np.frombuffer(payload, dtype=_LE_F32).astype(np.float32)


def pack(header: Header, payload: bytes) -> bytes:
    """The message bytes: magic, header length, canonical header, payload."""
    head = canonical(header.to_json())
    return _PREFIX.pack(MAGIC, len(head)) + head + payload


def make_header(
    kind: str,
    client: str,
    round_: int,
    nonce: str,
    num_samples: int,
    schema: Schema,
    payload: bytes,
    scheme: str,
    session: str = NO_SESSION,
) -> Header:
    """An unsigned header for ``payload``, with its SHA-256, in run ``session``."""
    digest = hashlib.sha256(payload).hexdigest()
    return Header(kind, client, round_, nonce, num_samples, schema, digest, scheme, None, session)


def unpack(raw: bytes, max_payload_bytes: int) -> tuple[Header, bytes]:
    """Parse and validate a message; raises :class:`WireError` for anything off-format.

    The payload's length must equal what the header declares; its hash is *not* checked
    here (that is the verifier's ``tampered`` check, after the signature).
    """
    if not isinstance(raw, bytes | bytearray):
        raise WireError("malformed", f"expected bytes, got {type(raw).__name__}")
    if len(raw) < _PREFIX.size:
        raise WireError("malformed", f"{len(raw)} bytes is shorter than the prefix")
    magic, head_len = _PREFIX.unpack_from(raw)
    if magic != MAGIC:
        raise WireError("malformed", "bad magic")
    if head_len > MAX_HEADER_BYTES:
        raise WireError("oversized", f"header of {head_len} bytes > {MAX_HEADER_BYTES}")
    if len(raw) - _PREFIX.size - head_len > max_payload_bytes:
        raise WireError("oversized", f"payload larger than {max_payload_bytes} bytes")
    head = bytes(raw[_PREFIX.size : _PREFIX.size + head_len])
    if len(head) != head_len:
        raise WireError("malformed", "truncated header")
    header = _parse_header(head)
    payload = bytes(raw[_PREFIX.size + head_len :])
    if len(payload) != header.schema.nbytes:
        raise WireError(
            "malformed", f"payload is {len(payload)} bytes, header declares {header.schema.nbytes}"
        )
    return header, payload


def _parse_header(head: bytes) -> Header:
    try:
        data = json.loads(head.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise WireError("malformed", f"header is not JSON: {exc}") from None
    if not isinstance(data, dict) or set(data) != _KEYS | {"signature"}:
        raise WireError("malformed", "header keys differ from the declared set")
    try:
        again = canonical(data)
    except ValueError:
        raise WireError("malformed", "header holds a non-finite number") from None
    if again != head:
        raise WireError("malformed", "header is not in canonical form")
    return Header(
        kind=_str(data, "kind", re.compile(r"^(update|global)$")),
        client=_str(data, "client", CLIENT_ID),
        round=_int(data, "round", 0, 10**9),
        nonce=_hex(data["nonce"], "nonce", 32),
        num_samples=_int(data, "num_samples", 0, 10**12),
        schema=_schema(data["schema"]),
        payload_sha256=_hex(data["payload_sha256"], "payload_sha256", 64),
        scheme=_str(data, "scheme", re.compile(r"^[a-z0-9-]{1,40}$")),
        signature=None if data["signature"] is None else _hex(data["signature"], "signature"),
        session=_hex(data["session"], "session", 32),
    )


def _str(data: dict, key: str, pattern: re.Pattern) -> str:
    value = data[key]
    if not isinstance(value, str) or not pattern.match(value):
        raise WireError("malformed", f"bad {key}")
    return value


def _int(data: dict, key: str, lo: int, hi: int) -> int:
    value = data[key]
    if type(value) is not int or not lo <= value <= hi:
        raise WireError("malformed", f"bad {key}")
    return value


def _hex(value: Any, key: str, length: int | None = None) -> str:
    ok = isinstance(value, str) and _HEX.match(value) and len(value) <= 1024
    if not ok or (length is not None and len(value) != length):
        raise WireError("malformed", f"bad {key}")
    return value


def _schema(value: Any) -> Schema:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_TENSORS:
        raise WireError("malformed", "bad schema")
    tensors = []
    for item in value:
        if not isinstance(item, dict) or set(item) != {"name", "shape", "dtype"}:
            raise WireError("malformed", "bad tensor entry")
        name, shape = item["name"], item["shape"]
        if not isinstance(name, str) or not _TENSOR_NAME.match(name) or item["dtype"] != DTYPE:
            raise WireError("malformed", "bad tensor name or dtype")
        if not isinstance(shape, list) or len(shape) > 8:
            raise WireError("malformed", "bad tensor shape")
        if any(type(d) is not int or not 0 <= d <= 2**31 for d in shape):
            raise WireError("malformed", "bad tensor dimension")
        tensors.append(TensorSpec(name, tuple(shape)))
    return Schema(tuple(tensors))


def encode_update(
    signer: Any,
    round_: int,
    vector: np.ndarray,
    schema: Schema,
    num_samples: int,
    nonce: str | None = None,
    session: str = NO_SESSION,
) -> bytes:
    """A signed update message from ``signer.client`` for run ``session`` (the session the
    server's global model carried; tests build unsigned messages with :func:`make_header`)."""
    import secrets

    payload = to_payload(vector)
    header = make_header(
        "update",
        signer.client,
        int(round_),
        nonce or secrets.token_hex(16),
        int(num_samples),
        schema,
        payload,
        signer.scheme,
        session,
    )
    signature = signer.sign(header.signed_bytes()).hex()
    return pack(_with_signature(header, signature), payload)


def _with_signature(header: Header, signature: str | None) -> Header:
    from dataclasses import replace

    return replace(header, signature=signature)


def encode_global(
    round_: int, vector: np.ndarray, schema: Schema, session: str = NO_SESSION
) -> bytes:
    """The server's global model for ``round_`` of run ``session``, unsigned (the server is
    trusted here); clients sign their updates for that session."""
    payload = to_payload(vector)
    header = make_header("global", "server", round_, "0" * 32, 1, schema, payload, "none", session)
    return pack(header, payload)


class GlobalModel(NamedTuple):
    """A decoded global-model message: its round, the flat weights, the run's session."""

    round: int
    vector: np.ndarray
    session: str


def decode_global(raw: bytes, schema: Schema, max_payload_bytes: int) -> GlobalModel:
    """The round, flat vector and session of a global-model message that matches ``schema``.

    Raises
    ------
    WireError
        The message does not parse, is not a global model of ``schema``, or its payload
        does not match its hash.
    """
    header, payload = unpack(raw, max_payload_bytes)
    if header.kind != "global" or header.schema != schema:
        raise WireError("malformed", "not a global model of the expected schema")
    if hashlib.sha256(payload).hexdigest() != header.payload_sha256:
        raise WireError("malformed", "global model payload does not match its hash")
    return GlobalModel(header.round, from_payload(payload), header.session)
