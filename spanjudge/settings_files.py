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

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    TomlConfigSettingsSource,
    YamlConfigSettingsSource,
)

from spanjudge.errors import ConfigError

__all__ = ["file_source"]


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
    return data


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
