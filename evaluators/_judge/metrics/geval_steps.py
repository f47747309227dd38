"""G-Eval's evaluation steps, generated once from the criteria and reused across cases,
metric copies, workers and restarts.

A key is the sha256 of the judge model's name and the full steps prompt (so the criteria, the
fields shown, the prompt template and its wording are all part of it). Steps live in a bounded
in-memory LRU and in one JSON file shared by every process on the machine::

    steps_cache.directory = Path("/var/cache/spanjudge")   # or SPANJUDGE_CACHE_DIR
    steps_cache.disk = False                                # memory only
    steps_cache.clear()

The file's default place is ``$SPANJUDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/spanjudge``, else
``~/.cache/spanjudge``. Writes are atomic (a temporary file renamed over the old one) under an
advisory lock, so concurrent processes never see a half-written file; a file that cannot be
read or parsed is ignored (and replaced at the next write), never an error. Two processes that
miss at the same moment may both generate steps; within one event loop, concurrent cases with
the same key wait for the first one's judge call.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

logger = logging.getLogger(__name__)

FILE_NAME = "geval_steps.json"
_FORMAT = 1

Source = Literal["memory", "disk", "judge"]


def default_directory() -> Path:
    """``$SPANJUDGE_CACHE_DIR``, else ``$XDG_CACHE_HOME/spanjudge``, else ``~/.cache/spanjudge``."""
    explicit = os.environ.get("SPANJUDGE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "spanjudge"


def steps_key(model: str, prompt: str) -> str:
    """The cache key of the steps ``model`` gives for ``prompt``."""
    text = json.dumps([model, prompt], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _valid_steps(value: Any) -> list[str] | None:
    if isinstance(value, list) and value and all(isinstance(s, str) and s.strip() for s in value):
        return list(value)
    return None


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An advisory lock between processes (POSIX); elsewhere the atomic rename must do."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with path.open("a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class StepsCache:
    """Evaluation steps by key: a bounded LRU in memory over a bounded JSON file on disk.

    ``directory`` None means :func:`default_directory` (read when first needed); ``disk``
    False keeps steps in memory only. ``maxsize`` bounds both.
    """

    def __init__(
        self, directory: Path | str | None = None, *, disk: bool = True, maxsize: int = 512
    ) -> None:
        self.directory = Path(directory) if directory is not None else None
        self.disk = disk
        self.maxsize = maxsize
        self.memory_hits = 0
        self.disk_hits = 0
        self.misses = 0
        self.generated = 0  # steps asked of the judge through get_or_create
        self._memory: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[int, str], tuple[asyncio.Lock, int]] = {}

    @property
    def path(self) -> Path:
        """The JSON file the steps are kept in."""
        return (self.directory or default_directory()) / FILE_NAME

    # ------------------------------------------------------------------ lookups
    def get(self, key: str) -> tuple[list[str], Source] | None:
        """The steps under ``key`` and where they were found, or None."""
        with self._lock:
            found = self._memory.get(key)
            if found is not None:
                self._memory.move_to_end(key)
                self.memory_hits += 1
                return list(found), "memory"
        if self.disk:
            entry = self._read_file().get(key)
            steps = _valid_steps(entry.get("steps")) if isinstance(entry, dict) else None
            if steps is not None:
                self._remember(key, steps)
                with self._lock:
                    self.disk_hits += 1
                return steps, "disk"
        with self._lock:
            self.misses += 1
        return None

    def put(self, key: str, steps: list[str], *, model: str = "") -> None:
        """Keep ``steps`` under ``key`` in memory and (with ``disk``) in the shared file."""
        self._remember(key, steps)
        if self.disk:
            self._write_file(key, {"steps": list(steps), "model": model, "created": time.time()})

    async def get_or_create(
        self, key: str, create: Callable[[], Awaitable[list[str]]], *, model: str = ""
    ) -> tuple[list[str], Source]:
        """The cached steps, or ``create()``'s (then cached). Concurrent callers on one event
        loop with the same key wait for the first instead of each asking the judge."""
        found = self.get(key)
        if found is not None:
            return found
        lock = self._enter(key)
        try:
            async with lock:
                found = self.get(key)
                if found is not None:
                    return found
                steps = await create()
                with self._lock:
                    self.generated += 1
                self.put(key, steps, model=model)
                return steps, "judge"
        finally:
            self._leave(key)

    def clear(self, *, disk: bool = False) -> None:
        """Forget the steps in memory (and the file's too with ``disk=True``)."""
        with self._lock:
            self._memory.clear()
            self.memory_hits = self.disk_hits = self.misses = self.generated = 0
        if disk:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    def __len__(self) -> int:
        return len(self._memory)

    # ------------------------------------------------------------------ internals
    def _remember(self, key: str, steps: list[str]) -> None:
        with self._lock:
            self._memory[key] = tuple(steps)
            self._memory.move_to_end(key)
            while len(self._memory) > self.maxsize:
                self._memory.popitem(last=False)

    def _enter(self, key: str) -> asyncio.Lock:
        slot = (id(asyncio.get_running_loop()), key)
        with self._lock:
            lock, users = self._key_locks.get(slot) or (asyncio.Lock(), 0)
            self._key_locks[slot] = (lock, users + 1)
            return lock

    def _leave(self, key: str) -> None:
        slot = (id(asyncio.get_running_loop()), key)
        with self._lock:
            lock, users = self._key_locks[slot]
            if users <= 1:
                del self._key_locks[slot]
            else:
                self._key_locks[slot] = (lock, users - 1)

    def _read_file(self) -> dict[str, Any]:
        """The file's entries; {} when it is absent, unreadable or not ours."""
        path = self.path
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            logger.warning("G-Eval steps cache %s is unreadable, ignoring it: %s", path, exc)
            return {}
        entries = data.get("entries") if isinstance(data, dict) else None
        if not isinstance(entries, dict) or data.get("format") != _FORMAT:
            logger.warning("G-Eval steps cache %s has an unknown layout, ignoring it", path)
            return {}
        return entries

    def _write_file(self, key: str, entry: dict[str, Any]) -> None:
        path = self.path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with _file_lock(path.with_name(path.name + ".lock")):
                entries = {
                    k: v
                    for k, v in self._read_file().items()
                    if isinstance(v, dict) and _valid_steps(v.get("steps")) is not None
                }
                entries[key] = entry
                if len(entries) > self.maxsize:  # keep the newest
                    newest = sorted(entries, key=lambda k: _created(entries[k]))[-self.maxsize :]
                    entries = {k: entries[k] for k in newest}
                fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
                try:
                    with os.fdopen(fd, "w", encoding="utf-8") as handle:
                        json.dump({"format": _FORMAT, "entries": entries}, handle)
                        handle.flush()
                        os.fsync(handle.fileno())
                    os.replace(tmp, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise
        except OSError as exc:
            # the steps are still cached in memory; only other processes miss out
            logger.warning("G-Eval steps cache: cannot write %s: %s", path, exc)


def _created(entry: dict[str, Any]) -> float:
    value = entry.get("created")
    return float(value) if isinstance(value, (int, float)) else 0.0


steps_cache = StepsCache()
"""The process-wide steps cache every G-Eval metric uses."""
