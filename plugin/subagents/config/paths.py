"""Where a project's files are: Rasa's default locations, or the ones given explicitly."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProjectPaths"]


@dataclass(frozen=True)
class ProjectPaths:
    """Where a project's files are; the defaults are Rasa's, relative to the project folder."""

    root: Path
    config: Path
    domain: tuple[Path, ...]
    data: tuple[Path, ...]
    endpoints: Path
    sub_agents: Path
    explicit: frozenset[str] = frozenset()
    """The options given explicitly (a missing explicit path is an error)."""

    @classmethod
    def resolve(cls, root: Path | str, *, config: Path | str | None = None,
                domain: Path | str | None = None,
                data: Path | str | list[Path | str] | tuple[Path | str, ...] | None = None,
                endpoints: Path | str | None = None,
                sub_agents: Path | str | None = None) -> ProjectPaths:
        """Paths for ``root``; relative paths given here are relative to ``root``.

        Defaults: ``config.yml``; ``domain.yml`` (or ``domain.yaml``) if present, else the
        ``domain`` folder; ``data``; ``endpoints.yml``; ``sub_agents``.
        """
        base = Path(root)

        def at(value: Path | str) -> Path:
            path = Path(value)
            return path if path.is_absolute() else base / path

        explicit = {name for name, value in (("config", config), ("domain", domain),
                                             ("data", data), ("endpoints", endpoints),
                                             ("sub_agents", sub_agents)) if value is not None}
        if domain is None:
            found = [p for p in (base / "domain.yml", base / "domain.yaml") if p.is_file()]
            domains: tuple[Path, ...] = (found[0],) if found else (base / "domain",)
        else:
            domains = (at(domain),)
        if data is None:
            datas: tuple[Path, ...] = (base / "data",)
        elif isinstance(data, (list, tuple)):
            datas = tuple(at(d) for d in data)
        else:
            datas = (at(data),)
        return cls(root=base, config=at(config or "config.yml"), domain=domains, data=datas,
                   endpoints=at(endpoints or "endpoints.yml"),
                   sub_agents=at(sub_agents or "sub_agents"), explicit=frozenset(explicit))
