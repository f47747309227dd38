"""The worker's settings file as a pydantic-settings source: TOML, YAML or JSON by its extension,
every problem reading or parsing it one :class:`~spanjudge.errors.ConfigError` naming the file.

``WorkerSettings.settings_customise_sources`` (:mod:`spanjudge.settings`) puts it last, under
the environment and keyword arguments::

    from pathlib import Path
    from spanjudge.settings import WorkerSettings
    from spanjudge.settings_files import file_source

    source = file_source(WorkerSettings, Path("worker.toml"))
"""

from __future__ import annotations

import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from spanjudge.errors import ConfigError

__all__ = ["file_source", "file_warnings", "readable_secrets"]


def _checked(kind: str, path: object, read: Callable[[], object]) -> dict[str, Any]:
    """The file's top-level mapping, or a ConfigError naming the file and what is wrong."""
    try:
        data = read()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except Exception as exc:  # each format's parser has its own error class
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a table/mapping of keys")
    warning = readable_secrets(Path(str(path)), data)
    if warning is not None and warning not in _FILE_WARNINGS:
        _FILE_WARNINGS.append(warning)
    return data


# Said by the worker once it has bound its port (file_warnings()), so that a setup mistake stays
# the one line a failed start prints.
_FILE_WARNINGS: list[str] = []


def file_warnings() -> list[str]:
    """The warnings about the config files read so far (:func:`readable_secrets`), each once:
    the list is emptied."""
    said = list(_FILE_WARNINGS)
    _FILE_WARNINGS.clear()
    return said


# Keys whose value is a secret wherever they appear: bearer_token, annotator_tokens,
# judge_options.api_key, an extra header's token... (not regression_key or interval_keys)
_SECRET_ENDINGS = ("token", "tokens", "api_key", "apikey", "secret", "password")


def _secret_keys(data: Any, prefix: str = "") -> list[str]:
    found: list[str] = []
    if isinstance(data, dict):
        for key, value in data.items():
            name = f"{prefix}{key}"
            if value and str(key).lower().replace("-", "_").endswith(_SECRET_ENDINGS):
                found.append(name)
            elif isinstance(value, dict | list):
                found.extend(_secret_keys(value, f"{name}."))
            elif isinstance(value, str) and "://" in value and urlsplit(value).password:
                found.append(name)  # a store_url with its password
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found.extend(_secret_keys(item, f"{prefix}{i}."))
    return found


def readable_secrets(path: Path, data: dict[str, Any]) -> str | None:
    """A warning when ``path`` can be read by every user of the machine and ``data`` (what
    it holds) has a secret: a token, a key, a password (the keys are named, never values)."""
    try:
        world_readable = bool(path.stat().st_mode & stat.S_IROTH)
    except OSError:
        return None
    secrets = _secret_keys(data) if world_readable else []
    if not secrets:
        return None
    return (
        f"{path}: every user of this machine can read it and it holds secrets "
        f"({', '.join(secrets)}): chmod 600 it, or set them from the environment "
        "(SPANJUDGE_BEARER_TOKEN...)"
    )


# The sources skip a missing file and let parser errors (or a list at the top level) escape as
# they are; these subclasses turn every such problem into one ConfigError.
class _TomlFile(TomlConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        read = super()._read_file
        return _checked("TOML", file_path, lambda: read(file_path))


class _YamlFile(YamlConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        read = super()._read_file
        return _checked("YAML", file_path, lambda: read(file_path))


class _JsonFile(JsonConfigSettingsSource):
    def _read_file(self, file_path: Any) -> dict[str, Any]:
        read = super()._read_file
        return _checked("JSON", file_path, lambda: read(file_path))


def file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    """The source reading ``path``; a missing file is a ConfigError (pydantic-settings would skip
    it silently)."""
    if not path.is_file():
        reason = "not a file" if path.exists() else "no such file"
        raise ConfigError(f"cannot read config file {path}: {reason}")
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        return _YamlFile(settings_cls, path)
    if suffix == ".json":
        return _JsonFile(settings_cls, path)
    return _TomlFile(settings_cls, path)  # .toml, and any other name
