"""The experiments' raw outputs, packed in ``evidence/`` (tsopt.core.evidence): unpack, pack, check.

Run from the repository root, with the standard library only (the GPU machine has torch and
no tsopt installation; the source tree is enough)::

    python3 -m scripts.evidence list                 # each archive: size, files, what it holds
    python3 -m scripts.evidence unpack EXP [EXP...]  # put bench/EXP's raw files back in place
    python3 -m scripts.evidence unpack --all --into DIR   # every archive, elsewhere
    python3 -m scripts.evidence pack EXP             # bench/EXP's new or changed raw files
                                                     # into evidence/EXP.tar.xz, then out of bench/
    python3 -m scripts.evidence check                # every archive against evidence/MANIFEST.json

A bench script that reads raw files can unpack them itself: ``raw_files("tune_gpu")`` (this
module, with the repository root on ``sys.path``) returns ``bench/tune_gpu/`` with them in it.

``pack`` takes every file of ``bench/EXP/`` but its README and notes (``*.md``), scripts
(``*.py``, ``*.sh``, ``*.cpp``) and the experiment's ``keep`` globs (``--keep GLOB`` adds one:
a small summary that stays beside the README; a glob without ``/`` names top-level files
only). A new experiment needs ``--what "..."``.
After it, commit ``evidence/`` and ``bench/EXP/`` (its ``.gitignore`` names the archived
files, so an unpacked copy stays out of git). Exit 2 with one line on a bad archive or name.
"""

from __future__ import annotations

import argparse
import fnmatch
import io
import lzma
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tsopt.core.evidence import (  # noqa: E402 - after the path: no installation needed
    FOLDER,
    MANIFEST_NAME,
    Archive,
    EvidenceError,
    Member,
    check,
    read_manifest,
    read_members,
    sha256_of,
    unpack,
    write_manifest,
)

BENCH_FOLDER = "bench"
ALWAYS_KEPT = ("*.md", "*.py", "*.sh", "*.cpp", ".gitignore")
"""File names never packed: an experiment's README and notes, its scripts, its ignore list."""
XZ_PRESET = 9 | lzma.PRESET_EXTREME
GITIGNORE_HEAD = ("# Raw outputs packed into evidence/{exp}.tar.xz: `python3 -m scripts.evidence "
                  "unpack {exp}` puts them back here.\n# Written by `python3 -m scripts.evidence "
                  "pack {exp}`; do not edit.\n")


def is_kept(relative: str, keep: tuple[str, ...]) -> bool:
    """Whether a file of an experiment folder (its path in the folder) stays out of the
    archive: a README, note or script by name, or a ``keep`` glob by path. A glob without a
    ``/`` keeps files at the folder's top level only (``fnmatch``'s ``*`` would otherwise
    cross folders, and a summary glob would keep every bulky table below it)."""
    name = PurePosixPath(relative).name
    return (any(fnmatch.fnmatchcase(name, p) for p in ALWAYS_KEPT)
            or any(fnmatch.fnmatchcase(relative, p) and ("/" in p or "/" not in relative)
                   for p in keep))


def folder_raw_files(experiment: str, keep: tuple[str, ...], root: Path) -> dict[str, Path]:
    """The files of ``bench/EXP/`` under ``root`` that belong in its archive, by member name."""
    base = root / BENCH_FOLDER / experiment
    if not base.is_dir():
        raise EvidenceError(f"{base}: no such experiment folder")
    found = {}
    for path in sorted(base.rglob("*")):
        rel = path.relative_to(base).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and not is_kept(rel, keep):
            found[f"{BENCH_FOLDER}/{experiment}/{rel}"] = path
    return found


def write_archive(path: Path, members: dict[str, bytes]) -> None:
    """A deterministic tar.xz of ``members``: sorted, times, owners and modes fixed."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(members[name]))
    path.write_bytes(lzma.compress(buffer.getvalue(), preset=XZ_PRESET))


@dataclass(frozen=True)
class Packed:
    """What a pack did: the archive as recorded, and the member names added or changed."""

    archive: Archive
    added: tuple[str, ...]
    changed: tuple[str, ...]
    removed_from_folder: int


def pack(experiment: str, root: Path, folder: Path = FOLDER, what: str | None = None,
         keep: tuple[str, ...] = (), remove: bool = True) -> Packed:
    """Add the raw files now in ``bench/EXP/`` (under ``root``) to ``evidence/EXP.tar.xz``
    (created if new; a file whose bytes changed replaces its archived copy), record the
    archive in the manifest, write ``bench/EXP/.gitignore`` naming every member (so an unpack
    leaves ``git status`` clean) and, unless ``remove`` is false, delete the packed files
    from the folder. ``keep`` globs are added to the experiment's; ``what`` sets its line."""
    folder.mkdir(parents=True, exist_ok=True)
    archives = read_manifest(folder) if (folder / MANIFEST_NAME).exists() else {}
    old = archives.get(experiment)
    if old is None and not what:
        raise EvidenceError(f"{experiment}: a new archive needs a line saying what it holds "
                            f"(--what)")
    members = read_members(old, folder) if old is not None else {}
    keep_all = tuple(dict.fromkeys((*(old.keep if old else ()), *keep)))
    raw = folder_raw_files(experiment, keep_all, root)
    if not raw and not members:
        raise EvidenceError(f"{root / BENCH_FOLDER / experiment}: no raw file to pack")
    added, changed = [], []
    for name, path in raw.items():
        data = path.read_bytes()
        if name not in members:
            added.append(name)
        elif members[name] != data:
            changed.append(name)
        members[name] = data
    archive_path = folder / f"{experiment}.tar.xz"
    if added or changed or old is None or not archive_path.exists():
        write_archive(archive_path, members)
    written = archive_path.read_bytes()
    archive = Archive(experiment, what or (old.what if old else ""), keep_all,
                      sha256_of(written), len(written),
                      tuple(Member(n, len(members[n]), sha256_of(members[n]))
                            for n in sorted(members)))
    archives[experiment] = archive
    write_manifest(archives, folder)
    write_gitignore(archive, root)
    if remove:
        for path in raw.values():
            path.unlink()
        _remove_empty_dirs(root / BENCH_FOLDER / experiment)
    return Packed(archive, tuple(added), tuple(changed), len(raw) if remove else 0)


def _remove_empty_dirs(base: Path) -> None:
    for path in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        if not any(path.iterdir()):
            path.rmdir()


def _ignore_pattern(relative: str) -> str:
    escaped = "".join(f"\\{c}" if c in "*?[]!#\\ " else c for c in relative)
    return f"/{escaped}"


def write_gitignore(archive: Archive, root: Path) -> None:
    prefix = f"{BENCH_FOLDER}/{archive.experiment}/"
    lines = [_ignore_pattern(m.path.removeprefix(prefix)) for m in archive.members]
    text = GITIGNORE_HEAD.format(exp=archive.experiment) + "".join(f"{line}\n" for line in lines)
    (root / BENCH_FOLDER / archive.experiment / ".gitignore").write_text(text)


def raw_files(experiment: str) -> Path:
    """``bench/EXP/`` with its archived raw files unpacked in place (already there: left as
    they are); for a bench script that reads them: ``from scripts.evidence import raw_files``."""
    unpack(experiment, ROOT)
    return ROOT / BENCH_FOLDER / experiment


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m scripts.evidence",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", type=Path, default=ROOT / "evidence",
                        help="the archives' folder (default: evidence/)")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="each archive: size, files, what it holds")
    up = sub.add_parser("unpack", help="put experiments' raw files back under bench/")
    up.add_argument("experiments", nargs="*")
    up.add_argument("--all", action="store_true", help="every archive")
    up.add_argument("--into", type=Path, default=ROOT,
                    help="where bench/EXP/... is written (default: the repository root)")
    up.add_argument("--overwrite", action="store_true",
                    help="replace files whose bytes differ from the archive's")
    pk = sub.add_parser("pack", help="bench/EXP's raw files into evidence/EXP.tar.xz")
    pk.add_argument("experiment")
    pk.add_argument("--what", help="what the archive holds (a line; needed for a new one)")
    pk.add_argument("--keep", action="append", default=[],
                    help="a glob (from bench/EXP/) of a summary that stays out of the archive")
    pk.add_argument("--leave-files", action="store_true",
                    help="do not delete the packed files from bench/EXP/")
    sub.add_parser("check", help="every archive against the manifest")
    args = parser.parse_args(argv)
    try:
        if args.command == "list":
            for _, archive in sorted(read_manifest(args.folder).items()):
                print(f"{archive.file}: {archive.bytes / 1e6:.2f} MB, {len(archive.members)} "
                      f"files ({sum(m.bytes for m in archive.members) / 1e6:.2f} MB unpacked): "
                      f"{archive.what}")
        elif args.command == "unpack":
            names = sorted(read_manifest(args.folder)) if args.all else args.experiments
            if not names:
                parser.error("unpack: name an experiment (or --all)")
            for exp in names:
                written = unpack(exp, args.into, args.folder, overwrite=args.overwrite)
                print(f"{exp}: {len(written)} files written under {args.into}/bench/{exp}")
        elif args.command == "pack":
            done = pack(args.experiment, ROOT, args.folder, what=args.what,
                        keep=tuple(args.keep), remove=not args.leave_files)
            a = done.archive
            print(f"{args.folder / a.file}: {a.bytes / 1e6:.2f} MB, {len(a.members)} files; "
                  f"added {len(done.added)}, changed {len(done.changed)}; "
                  f"{done.removed_from_folder} removed from bench/{a.experiment}/")
            for name in done.added + done.changed:
                print(f"  {name}")
        else:
            problems = check(args.folder)
            for line in problems:
                print(line, file=sys.stderr)
            if problems:
                return 1
            print(f"{args.folder}: every archive matches {args.folder / 'MANIFEST.json'}")
    except EvidenceError as exc:
        print(f"python3 -m scripts.evidence: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
