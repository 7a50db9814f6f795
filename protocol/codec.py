"""msgpack encoding with limits (PROTOCOL.md section 3): decoding caps every container and string,
so one bad peer cannot make the env allocate without bound."""

from __future__ import annotations

from typing import Any

import msgpack

from .messages import BAD_MESSAGE, TOO_LARGE, ProtocolError

#: Largest message, in bytes, either side accepts (also set as ZMQ_MAXMSGSIZE on sockets).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MAX_CONTAINER = 1_000_000  #: Largest array or map (entries) and string or binary (bytes) inside a message.
MAX_STRING = 1_000_000


def encode(message: dict[str, Any]) -> bytes:
    """Serialise a message: msgpack, string keys, binary strings kept apart from text."""
    return msgpack.packb(message, use_bin_type=True)


def decode(data: bytes) -> Any:
    """Parse one message body, refusing oversized, truncated or trailing-garbage input."""
    if len(data) > MAX_MESSAGE_BYTES:
        raise ProtocolError(TOO_LARGE, f"message of {len(data)} bytes exceeds the limit of {MAX_MESSAGE_BYTES}")
    try:
        return msgpack.unpackb(
            data, raw=False, strict_map_key=True,
            max_str_len=MAX_STRING, max_bin_len=MAX_STRING, max_array_len=MAX_CONTAINER,
            max_map_len=MAX_CONTAINER, max_ext_len=0, ext_hook=_refuse_ext,
        )
    except msgpack.ExtraData:
        raise ProtocolError(BAD_MESSAGE, "trailing bytes after the message; send exactly one msgpack value") from None
    except (ValueError, msgpack.UnpackException, TypeError) as exc:
        if "exceeds max_" in str(exc) and "max_ext_len" not in str(exc):
            raise ProtocolError(TOO_LARGE, f"a string or container exceeds the limits of {MAX_STRING:,} "
                                           f"bytes / {MAX_CONTAINER:,} entries ({exc})") from None
        raise ProtocolError(BAD_MESSAGE, f"not a valid msgpack message ({exc or 'reserved byte'})") from None


def _refuse_ext(code: int, data: bytes) -> None:
    raise ValueError(f"ext type {code} is not used by the protocol")
