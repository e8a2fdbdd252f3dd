"""Write the lock: the exact version of every distribution `make test` installs, read from an environment.

Run with the Python of an environment where onnxsight was installed with the extras `make test` uses
(``make lock`` builds a fresh one, resolving the newest releases pyproject.toml allows): it walks
onnxsight's requirements with those extras, and theirs, through the installed metadata, and writes one
``name==version`` line per distribution, sorted. Markers are evaluated for this interpreter and platform
(Linux, CPython 3.11 on this project's machines); a dependency only another platform needs is not pinned.

    python requirements/lock.py --extras dev,bench --out requirements/lock.txt
    python requirements/lock.py --extras dev,bench --check requirements/lock.txt   # the installed set is locked
    python requirements/lock.py --extras dev,bench --floors   # pyproject's lowest versions, for make test-oldest
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def requirements(extras: list[str]) -> list[Requirement]:
    """The checkout's own requirements (pyproject.toml, not an installed copy's metadata) with ``extras``."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [extra for extra in extras if extra not in optional]
    if unknown:
        raise SystemExit(f"lock: pyproject.toml has no extras {unknown}; it has {sorted(optional)}")
    return [Requirement(line) for line in project["dependencies"] + [r for e in extras for r in optional[e]]]


def _applies(req: Requirement, extras: frozenset[str]) -> bool:
    return req.marker is None or any(req.marker.evaluate(dict(default_environment(), extra=extra))
                                     for extra in extras | {""})


def closure(extras: list[str]) -> dict[str, str]:
    """{canonical name: installed version} of every distribution onnxsight[extras] needs here."""
    found: dict[str, str] = {}
    todo = [(canonicalize_name(r.name), frozenset(r.extras)) for r in requirements(extras) if _applies(r, frozenset())]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, wanted = todo.pop()
        if (name, wanted) in seen:
            continue
        seen.add((name, wanted))
        dist = metadata.distribution(name)
        found[name] = dist.version
        todo += [(canonicalize_name(r.name), frozenset(r.extras))
                 for r in map(Requirement, dist.requires or []) if _applies(r, wanted)]
    return found


def read_lock(path: str | Path) -> dict[str, str]:
    """{canonical name: pinned version} of a lock file."""
    pins = {}
    for line in Path(path).read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            req = Requirement(line)
            pins[canonicalize_name(req.name)] = str(req.specifier).removeprefix("==")
    return pins


def floors(extras: list[str]) -> list[str]:
    """``name==X`` for each requirement of pyproject.toml declared ``>=X``: the oldest versions it allows."""
    pins = {}
    for req in requirements(extras):
        lowest = [spec.version for spec in req.specifier if spec.operator == ">="]
        if lowest:
            pins[canonicalize_name(req.name)] = f"{canonicalize_name(req.name)}=={lowest[0]}"
    return sorted(pins.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extras", default="dev,bench", help="onnxsight's extras `make test` installs")
    parser.add_argument("--out", help="write the lock here")
    parser.add_argument("--check", help="exit 1 unless every installed distribution is pinned at its version here")
    parser.add_argument("--floors", action="store_true", help="print pyproject.toml's floors as pins and exit")
    args = parser.parse_args(argv)
    if args.floors:
        print("\n".join(floors([e for e in args.extras.split(",") if e])))
        return 0
    pins = closure([e for e in args.extras.split(",") if e])
    lines = [f"{name}=={version.split('+')[0]}" for name, version in sorted(pins.items())]
    if args.check:
        locked = read_lock(args.check)
        wrong = [f"lock: installed {name}=={version}, {args.check} has {locked.get(name, 'no pin')}"
                 for name, version in (line.split("==") for line in lines) if locked.get(name) != version]
        print("\n".join(wrong) or f"lock: every installed distribution is pinned at its version in {args.check}")
        return 1 if wrong else 0
    header = ("# The exact versions `make test` (and CI) installs: pip install -c requirements/lock.txt ...\n"
              f"# Generated by `make lock` (requirements/lock.py --extras {args.extras}) with Python "
              f"{sys.version.split()[0]} on {sys.platform}; edit by hand only to add a pin (see docs/environments.md).\n")
    text = header + "\n".join(lines) + "\n"
    if args.out:
        with open(args.out, "w") as out:
            out.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
