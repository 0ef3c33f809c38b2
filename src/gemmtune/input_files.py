"""Files the user names as input (a recording to plot, trials to import, a table to replay, timing
CSVs): read as text or JSON, or refused with one line that names the file and says what is wrong
with it — missing, a directory, empty, binary, not UTF-8, not JSON. What each reader then expects
of the content (its schema) it checks itself, raising InputFileError the same way."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import GemmtuneError


class InputFileError(GemmtuneError):
    """A file given as input that is not what it should be: bad input, exit status 2."""

    exit_code = 2


def read_text(path: Path | str, what: str, allow_empty: bool = False) -> str:
    """The file at `path` as UTF-8 text; InputFileError saying why not. `what`: what the file should
    be ("a ladder recording"), for the message."""
    path = Path(path)
    return decode(read_bytes(path, what), str(path), what, allow_empty)


def read_bytes(path: Path, what: str) -> bytes:
    if not path.exists():
        raise InputFileError(f"no such file: {path}")
    if path.is_dir():
        raise InputFileError(f"{path} is a directory, not {what}")
    try:
        return path.read_bytes()
    except OSError as err:
        raise InputFileError(f"cannot read {path}: {err.strerror or err}") from None


def decode(raw: bytes, name: str, what: str, allow_empty: bool = False) -> str:
    """Bytes read from `name` as text; InputFileError when they are binary, not UTF-8 or (unless
    allowed) empty."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(f"{name} is not {what}: byte {err.start} is not UTF-8 (a binary file?)") from None
    if "\x00" in text:
        raise InputFileError(f"{name} is not {what}: it holds NUL bytes (binary data)")
    if not allow_empty and not text.strip():
        raise InputFileError(f"{name} is empty, not {what}")
    return text


def read_json(path: Path | str, what: str) -> Any:
    """The JSON document at `path`; InputFileError (with the line of a syntax error) when it is not one."""
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise InputFileError(f"{path} is not {what}: not valid JSON ({err.msg} at line {err.lineno}, "
                             f"column {err.colno})") from None


def read_json_object(path: Path | str, what: str) -> dict:
    """read_json, and the document must be a JSON object."""
    data = read_json(path, what)
    if not isinstance(data, dict):
        raise InputFileError(f"{path} is not {what}: it holds a JSON {json_kind(data)}, not an object")
    return data


def json_kind(value: Any) -> str:
    """JSON's name for the type of a parsed value: object, array, string, number, boolean, null."""
    kinds = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)
