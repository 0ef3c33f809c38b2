"""The config a grouped launch uses: the tuning database's fastest for the spec's GroupedKey on this GPU
(`gemmtune tune-grouped` fills it), else default_config. Looked up once per (spec, GPU) and kept in this
process, so after the first call of a shape the call path reads a dict, never the database.

The database is the default one (~/.cache/gemmtune/tuning.sqlite) unless `use_database` names another; a
database that cannot be read gives the default config and one warning, never a failed call.
"""
from __future__ import annotations

import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Callable

from ..errors import GemmtuneError
from .config import GroupedConfig, default_config, keeps_fp8_accuracy, rejections
from .spec import GroupedSpec

_chosen: dict[tuple[GroupedSpec, int], GroupedConfig] = {}
_lock = threading.Lock()
_database: list[Path | None] = [None]  # None: tune.db.default_db_path()
_forget_hooks: list[Callable[[], None]] = []  # what else keeps choices: torch/grouped_calls' launch plans


def on_forget(hook: Callable[[], None]) -> None:
    """Call `hook` whenever the choices are dropped (use_database, forget), so that caches built on them go too."""
    _forget_hooks.append(hook)


def use_database(path: Path | str | None) -> None:
    """Look tuned configs up in `path` from now on (None: the default database); forgets earlier choices."""
    with _lock:
        _database[0] = Path(path) if path is not None else None
        _chosen.clear()
    _run_hooks()


def forget() -> None:
    """Drop the choices kept so far (a tune in this process added configs the next lookup should see)."""
    with _lock:
        _chosen.clear()
    _run_hooks()


def _run_hooks() -> None:
    for hook in _forget_hooks:
        hook()


def chosen_config(spec: GroupedSpec, ordinal: int = 0) -> GroupedConfig:
    """The tuned config of `spec` on GPU `ordinal` where the database has one that fits it, else the default."""
    key = (spec, ordinal)
    found = _chosen.get(key)  # the call path: one dict read
    if found is not None:
        return found
    with _lock:
        if key not in _chosen:
            _chosen[key] = tuned_config(spec, ordinal, _database[0]) or default_config(spec)
        return _chosen[key]


def tuned_config(spec: GroupedSpec, ordinal: int = 0, db_path: Path | None = None) -> GroupedConfig | None:
    """The database's fastest verified config for spec's GroupedKey on GPU `ordinal`, or None (no database,
    no trial, or a config that does not fit this spec or would lose its fp8 accuracy)."""
    from ..tune.db import default_db_path

    path = db_path or default_db_path()
    if not path.exists():
        return None
    try:
        config = _lookup(spec, ordinal, path)
    except (GemmtuneError, sqlite3.Error) as err:
        warnings.warn(f"gemmtune: grouped configs not read from {path}: {err}; using the default", stacklevel=3)
        return None
    # (a database written before keeps_fp8_accuracy may hold an unpromoted fp8 config as the fastest)
    return config if config is not None and not rejections(config, spec) and keeps_fp8_accuracy(config, spec) else None


def _lookup(spec: GroupedSpec, ordinal: int, path: Path) -> GroupedConfig | None:
    from ..device import query_device
    from ..tune.grouped_db import best_config_json
    from ..tune.grouped_records import GroupedKey, config_from_json
    from .render import VERSION

    device = query_device(ordinal)
    found = best_config_json(path, GroupedKey.of(spec), device.name, device.sm_count, VERSION)
    return config_from_json(found) if found is not None else None
