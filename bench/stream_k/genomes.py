"""Known GEMM genomes by hash prefix, from the committed evidence: the cross-check lists
(``bench/tune_gpu/known*.json``), the seed library and the study databases of every round
(``bench/tune_gpu/results*/studies*.db.tar.xz``, unpacked to a temporary folder). The
tune_gpu files are raw outputs, unpacked from ``evidence/tune_gpu.tar.xz`` first."""

from __future__ import annotations

import json
import sqlite3
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _tune_gpu() -> Path:
    from scripts.evidence import raw_files

    return raw_files("tune_gpu")


def _known_files() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(_tune_gpu().glob("known*.json")):
        for entries in json.loads(path.read_text()).values():
            docs += [e["genome"] for e in entries]
    library = json.loads((ROOT / "tsopt" / "data" / "seed_library.json").read_text())
    docs += [e["genome"] for e in library["entries"] if e["space"] == "gemm"]
    return docs


def _study_genomes() -> list[dict[str, Any]]:
    docs = []
    with tempfile.TemporaryDirectory() as tmp:
        for archive in sorted(_tune_gpu().glob("results*/studies*.db.tar.xz")):
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
        for db in sorted(Path(tmp).rglob("*.db")):
            with sqlite3.connect(db) as conn:
                docs += [json.loads(g) for (g,) in conn.execute("select genome_json from tsopt_candidate")]
    return docs


def known_genomes() -> dict[str, dict[str, Any]]:
    """Genome documents by full hash."""
    from tsopt.core.genome import Genome

    out: dict[str, dict[str, Any]] = {}
    for doc in _known_files() + _study_genomes():
        out.setdefault(Genome.from_dict(doc).hash, doc)
    return out


def genome_doc(prefix: str, known: dict[str, dict[str, Any]]) -> dict[str, Any]:
    hits = [h for h in known if h.startswith(prefix)]
    if len(hits) != 1:
        raise KeyError(f"{prefix}: {len(hits)} known genomes")
    return json.loads(json.dumps(known[hits[0]]))


def variant(doc: dict[str, Any], **genes: Any) -> dict[str, Any]:
    """``doc`` with genes changed (structure or numeric, wherever the gene lives; a new
    boolean or string gene goes to structure, a new integer one to numeric)."""
    out = json.loads(json.dumps(doc))
    for name, value in genes.items():
        if name in out["numeric"]:
            out["numeric"][name] = value
        elif name in out["structure"] or isinstance(value, (bool, str)):
            out["structure"][name] = value
        else:
            out["numeric"][name] = value
    return out
