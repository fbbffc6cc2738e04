"""The evidence archives (tsopt.core.evidence, scripts/evidence.py) and the bench boundary.

- ``pack`` takes an experiment folder's raw files into ``evidence/EXP.tar.xz`` (README,
  notes, scripts and ``keep`` globs stay), the same files giving the same bytes, writes the
  folder's ``.gitignore`` and removes what it packed; a second pack adds a new file and
  replaces a changed one; ``unpack`` puts every file back byte for byte, and refuses to
  overwrite a file that differs; an archive whose bytes or members are not the manifest's is
  refused, naming it. All on folders made here (tmp_path), nothing committed is read.
- ``tsopt corpus build --archives`` reads a toy experiment's archive (``tests/test_corpus.py``'s
  study archive and results file, packed here) as the corpus reads the files themselves, the
  records named as the experiment wrote them, and refuses a tampered archive in one line.
- The boundary (issue 31): no test and no product module (tsopt/, db/, workers/,
  search_spaces/, reports/) reads ``bench/`` (a path into it that is not an experiment's
  script), no test reads ``evidence/``, and ``bench/`` without its unpacked raw files stays
  under 3 MB.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from scripts.evidence import pack
from tests.test_corpus import evidence  # noqa: F401 - the fixture: a study archive, results
from tsopt.app.corpus import load_corpus, records_from_evidence
from tsopt.cli import app
from tsopt.core.evidence import (
    MANIFEST_NAME,
    EvidenceError,
    check,
    read_manifest,
    unpack,
)

ROOT = Path(__file__).resolve().parents[1]


def _experiment(root: Path) -> dict[str, bytes]:
    """A small experiment folder: README, script, a kept summary, two raw files in a subfolder."""
    files = {"README.md": b"# toy\n", "run.py": b"print('toy')\n",
             "summary.json": b'{"best": 1.02}\n',
             "results/a.results.json": b'{"measurements": []}\n',
             "results/logs/b.log": b"SYNTHETIC log line\n"}
    for rel, data in files.items():
        path = root / "bench" / "toy" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return files


def test_pack_then_unpack_gives_every_raw_file_back(tmp_path: Path) -> None:
    files = _experiment(tmp_path)
    archives = tmp_path / "evidence"
    done = pack("toy", tmp_path, archives, what="a toy experiment", keep=("summary.json",))
    assert done.added == ("bench/toy/results/a.results.json", "bench/toy/results/logs/b.log")
    folder = tmp_path / "bench" / "toy"
    # What stays: the README, the script, the kept summary, and the ignore list.
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "README.md", "run.py",
                                                        "summary.json"]
    ignored = (folder / ".gitignore").read_text().splitlines()
    assert ignored[-2:] == ["/results/a.results.json", "/results/logs/b.log"]
    archive = read_manifest(archives)["toy"]
    assert archive.what == "a toy experiment" and archive.keep == ("summary.json",)
    assert check(archives) == []

    first = (archives / "toy.tar.xz").read_bytes()
    written = unpack("toy", tmp_path, archives)
    assert len(written) == 2
    for rel in ("results/a.results.json", "results/logs/b.log"):
        assert (folder / rel).read_bytes() == files[rel]
    # Unpacked and packed again, unchanged: the same bytes.
    assert pack("toy", tmp_path, archives).added == ()
    assert (archives / "toy.tar.xz").read_bytes() == first

    # A new raw file and a changed one: the new is added, the changed replaces its copy.
    unpack("toy", tmp_path, archives)
    (folder / "results" / "logs" / "b.log").write_bytes(b"SYNTHETIC log, remade\n")
    (folder / "results" / "c.results.json").write_bytes(b'{"measurements": [1]}\n')
    again = pack("toy", tmp_path, archives)
    assert again.added == ("bench/toy/results/c.results.json",)
    assert again.changed == ("bench/toy/results/logs/b.log",)
    scratch = tmp_path / "scratch"
    unpack("toy", scratch, archives)
    assert (scratch / "bench/toy/results/logs/b.log").read_bytes() == b"SYNTHETIC log, remade\n"
    assert (scratch / "bench/toy/results/a.results.json").read_bytes() == files[
        "results/a.results.json"]
    assert not (scratch / "bench/toy/README.md").exists()


def test_a_keep_glob_without_a_slash_keeps_top_level_files_only(tmp_path: Path) -> None:
    _experiment(tmp_path)
    folder = tmp_path / "bench" / "toy"
    (folder / "sub").mkdir()
    (folder / "sub" / "summary.json").write_bytes(b'{"best": 0.99}\n')
    (folder / "top.table.json").write_bytes(b"{}\n")
    (folder / "sub" / "deep.table.json").write_bytes(b"{}\n")
    (folder / "sub" / "kept.table.json").write_bytes(b"{}\n")
    done = pack("toy", tmp_path, tmp_path / "evidence", what="a toy experiment",
                keep=("summary.json", "*.table.json", "sub/kept.*"))
    # `*` would cross the folder: a glob without `/` keeps the top level's files only.
    assert "bench/toy/sub/summary.json" in done.added
    assert "bench/toy/sub/deep.table.json" in done.added
    assert (folder / "summary.json").exists() and (folder / "top.table.json").exists()
    assert (folder / "sub" / "kept.table.json").exists()
    assert not (folder / "sub" / "summary.json").exists()


def test_an_archive_that_is_not_the_manifests_is_refused_naming_it(tmp_path: Path) -> None:
    _experiment(tmp_path)
    archives = tmp_path / "evidence"
    with pytest.raises(EvidenceError, match="needs a line saying what it holds"):
        pack("toy", tmp_path, archives)
    pack("toy", tmp_path, archives, what="a toy experiment")
    # Unpacking over a file that differs: refused, the file named, nothing written.
    unpack("toy", tmp_path, archives)
    log = tmp_path / "bench/toy/results/logs/b.log"
    log.write_bytes(b"edited\n")
    with pytest.raises(EvidenceError, match=r"b\.log: differs from toy\.tar\.xz's copy"):
        unpack("toy", tmp_path, archives)
    assert log.read_bytes() == b"edited\n"
    with pytest.raises(EvidenceError, match="no archive for experiment 'other'"):
        unpack("other", tmp_path, archives)

    archive = archives / "toy.tar.xz"
    good = archive.read_bytes()
    archive.write_bytes(good[:-8] + b"\0" * 8)
    with pytest.raises(EvidenceError, match=r"toy\.tar\.xz: sha256 .*, the manifest says"):
        unpack("toy", tmp_path / "elsewhere", archives)
    assert check(archives) and "sha256" in check(archives)[0]

    # A member outside bench/toy/, with the manifest made to match: still refused.
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz") as tar:
        info = tarfile.TarInfo("../escape.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    archive.write_bytes(buffer.getvalue())
    doc = json.loads((archives / MANIFEST_NAME).read_text())
    doc["archives"]["toy"]["sha256"] = hashlib.sha256(buffer.getvalue()).hexdigest()
    doc["archives"]["toy"]["files"] = {"../escape.txt": {
        "bytes": 2, "sha256": hashlib.sha256(b"x\n").hexdigest()}}
    (archives / MANIFEST_NAME).write_text(json.dumps(doc))
    with pytest.raises(EvidenceError, match=r"'\.\./escape\.txt' is not under bench/toy/"):
        unpack("toy", tmp_path / "elsewhere", archives)
    assert not (tmp_path / "escape.txt").exists()


def test_the_command_line_names_a_bad_experiment_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "scripts.evidence", "--folder",
                           str(tmp_path / "none"), "unpack", "toy"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "MANIFEST.json: not readable" in done.stderr


# -- the corpus from the archives ---------------------------------------------------------


def test_the_corpus_is_built_from_the_evidence_archives(
        evidence: dict[str, Path],  # noqa: F811 - the fixture imported above
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tsopt corpus build`` reads the archives (``--archives``, unpacked in a scratch folder
    and checked first), the same records as the files themselves, named as the experiment
    wrote them; run where there is no bench/ at all. A tampered archive: one line, exit 2."""
    import tsopt.app.corpus as corpus_module

    repo = tmp_path / "repo"
    folder = repo / "bench" / "toy"
    folder.mkdir(parents=True)
    for kind in ("archive", "results"):
        (folder / evidence[kind].name).write_bytes(evidence[kind].read_bytes())
    (folder / "README.md").write_text("# toy\n")
    pack("toy", repo, repo / "evidence", what="a toy experiment's study and results")
    assert sorted(p.name for p in folder.iterdir()) == [".gitignore", "README.md"]
    monkeypatch.setattr(corpus_module, "EVIDENCE",
                        ("bench/toy/*.db.tar.xz", "bench/toy/sweep.json"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = CliRunner().invoke(app, ["corpus", "build", "--archives", str(repo / "evidence"),
                                      "--out", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    records, searches = load_corpus(tmp_path / "c")
    direct = records_from_evidence([evidence["archive"], evidence["results"]],
                                   evidence["archive"].parent)
    assert [r.source for r in records] == ["bench/toy/studies.db.tar.xz"] * 4 + [
        "bench/toy/sweep.json"]
    assert {r.experiment for r in records} == {"bench/toy"}
    assert [(r.genome_hash, r.ratio, r.pass_id.split(" @ ")[-1]) for r in records] == [
        (r.genome_hash, r.ratio, r.pass_id.split(" @ ")[-1]) for r in direct]
    assert [s.sources for s in searches] == [("bench/toy/studies.db.tar.xz",)]
    assert json.loads((tmp_path / "c" / "manifest.json").read_text())["sources"] == [
        "bench/toy/studies.db.tar.xz", "bench/toy/sweep.json"]
    stale = CliRunner().invoke(app, ["corpus", "build", "--check", "--archives",
                                     str(repo / "evidence"), "--out", str(tmp_path / "c")])
    assert stale.exit_code == 0 and "up to date" in " ".join(stale.output.split())

    archive = repo / "evidence" / "toy.tar.xz"
    archive.write_bytes(archive.read_bytes()[:-4] + b"\0\0\0\0")
    tampered = CliRunner().invoke(app, ["corpus", "build", "--archives",
                                        str(repo / "evidence"), "--out", str(tmp_path / "d")])
    said = " ".join(tampered.output.split())
    assert tampered.exit_code == 2 and said.count("sha256") == 1
    assert "toy.tar.xz: sha256" in said and "the manifest says" in said
    assert not (tmp_path / "d").exists()

# -- the boundary ------------------------------------------------------------------------------

PACKAGES = ("tsopt", "db", "workers", "search_spaces", "reports")
NAMES_ONLY = {
    # Member names inside the evidence archives, matched in the unpacked archives (a scratch
    # folder) and against a corpus record's source: never a path in the checkout.
    ("tsopt/app/corpus.py", "EVIDENCE"), ("tsopt/app/corpus.py", "SHIPPED_SOURCES"),
    ("tsopt/core/evidence.py", "MEMBER_PREFIX"),
}


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _names_a_script(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether the path expression holding ``node`` ends in a ``.py`` file (an experiment's
    script, run or imported: code, not data)."""
    top = node
    while isinstance(parents.get(id(top)), ast.BinOp):
        top = parents[id(top)]
    while isinstance(top, ast.BinOp):
        top = top.right
    if isinstance(top, ast.Constant) and isinstance(top.value, str):
        return top.value.endswith(".py")
    return False


def _compared(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """A name compared with a recorded source (``source.startswith("bench/...")``)."""
    parent = parents.get(id(node))
    return isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute) and (
        parent.func.attr in ("startswith", "endswith"))


PATH_CALLS = {"Path", "PurePath", "PurePosixPath", "open", "join", "glob", "iglob", "rglob"}


def _in_a_path(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether a bare folder name is a part of a path: ``ROOT / "bench"``, ``Path("bench")``,
    ``os.path.join(..., "bench")`` (a temporary folder named so is not)."""
    parent = parents.get(id(node))
    if isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Div):
        return True
    if isinstance(parent, ast.Call):
        func = parent.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        return name in PATH_CALLS
    return False


def bench_reads(path: Path, folders: tuple[str, ...], rel: str | None = None) -> list[str]:
    """Every string in ``path``'s code that names a path into one of ``folders`` (``bench``
    as a part of a path, or ``bench/...``), outside docstrings, scripts, name comparisons and
    NAMES_ONLY. ``rel``: the file's name from the repository root."""
    tree = ast.parse(path.read_text())
    rel = rel or path.relative_to(ROOT).as_posix()
    docs, parents = _docstrings(tree), _parents(tree)
    allowed: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and (rel, t.id) in NAMES_ONLY for t in targets):
                allowed |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        value = node.value.strip()
        bare = value in folders and _in_a_path(node, parents)
        if not bare and not any(value.startswith(f"{f}/") for f in folders):
            continue
        if (id(node) in docs or id(node) in allowed or _names_a_script(node, parents)
                or _compared(node, parents) or value.endswith(".py")):
            continue
        found.append(f"{rel}:{node.lineno}: {node.value!r}")
    return found


def test_no_test_or_product_module_reads_bench_or_the_evidence() -> None:
    # This file is left out: it measures bench/ and packs toy folders it makes in tmp_path.
    scanned = {p: ("bench", "evidence") for p in sorted((ROOT / "tests").rglob("*.py"))
               if p != Path(__file__).resolve()}
    for package in PACKAGES:
        scanned |= {p: ("bench",) for p in sorted((ROOT / package).rglob("*.py"))}
    found = [line for path, folders in scanned.items() for line in bench_reads(path, folders)]
    assert len(scanned) > 150
    assert not found, "reads of bench/ or evidence/:\n" + "\n".join(found)


def test_the_scan_sees_a_read_of_bench(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text('from pathlib import Path\nROOT = Path(".")\n'
                       'A = ROOT / "bench" / "tune_gpu" / "known.json"\n'
                       'B = open("bench/copy_h200/RESULTS.json")\n'
                       'C = ROOT / "evidence" / "tune_gpu.tar.xz"\n'
                       'OK = ROOT / "bench" / "oracle" / "choose.py"\n'
                       'D = tmp_path_factory.mktemp("evidence")\n'
                       '"""bench/ in a docstring is a comment"""\n')
    found = bench_reads(planted, ("bench", "evidence"), "tests/planted.py")
    assert sorted(line.split(":", 2)[1] + line.split(": ", 1)[1] for line in found) == [
        "3'bench'", "4'bench/copy_h200/RESULTS.json'", "5'evidence'"]


def test_bench_holds_readmes_scripts_and_summaries_under_3_mb() -> None:
    """The size of bench/ as committed: its files less any unpacked raw file (a member of an
    evidence archive, put back by ``scripts.evidence unpack``)."""
    unpacked: set[str] = set()
    for line in (ROOT / "bench").glob("*/.gitignore"):
        experiment = line.parent.name
        unpacked |= {f"bench/{experiment}{entry}" for entry in line.read_text().splitlines()
                     if entry.startswith("/")}
    sizes = {p.relative_to(ROOT).as_posix(): p.stat().st_size
             for p in (ROOT / "bench").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    committed = {name: size for name, size in sizes.items() if name not in unpacked}
    assert any(name.endswith("README.md") for name in committed)
    total = sum(committed.values())
    assert total < 3_000_000, (f"bench/ holds {total / 1e6:.2f} MB; largest: "
                               f"{sorted(committed.items(), key=lambda kv: -kv[1])[:5]}")
