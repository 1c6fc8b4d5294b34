"""Checking a savepoint: every file its descriptor lists is present and intact."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import CorruptFileError
from ..format.restores import read_claim
from ..format.storage import Storage, Written
from ..tools.progress import Progress
from .layout import DESCRIPTOR, SavepointDescriptor


@dataclass
class SavepointReport:
    location: str
    savepoint: dict[str, Any]  # the descriptor, without its file list
    files: int
    bytes: int
    verified: bool  # every file present with its recorded size and checksum
    problems: list[str] = field(default_factory=list)
    claimed_by: dict[str, Any] | None = None  # a CLAIM restore owns its files now

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "savepoint", **asdict(self)}


def is_savepoint(storage: Storage) -> bool:
    return storage.read_if_exists(DESCRIPTOR) is not None


def verify_savepoint(storage: Storage, quiet: bool = True) -> SavepointReport:
    where = f"{storage.url}/{DESCRIPTOR}"
    descriptor = SavepointDescriptor.from_json(storage.read(DESCRIPTOR, "savepoint"), where)
    summary = {k: v for k, v in asdict(descriptor).items() if k != "files"}
    report = SavepointReport(storage.url, summary, len(descriptor.files),
                             descriptor.total_bytes, verified=True)
    progress = Progress.for_terminal(f"verify {storage.url}", descriptor.total_bytes,
                                     len(descriptor.files), quiet)
    for saved in descriptor.files:
        try:
            storage.verify(saved.path, Written(saved.size, saved.checksum),
                           f"savepoint {storage.url}")
        except CorruptFileError as e:
            report.problems.append(str(e))
        progress.advance(saved.size)
    progress.close()
    report.verified = not report.problems
    claim = read_claim(storage)
    if claim is not None:
        report.claimed_by = asdict(claim)
    return report


def format_savepoint_report(report: SavepointReport) -> str:
    sp = report.savepoint
    lines = [f"savepoint {report.location}  ({sp['format']}, batch {sp['batch']} of query "
             f"{sp['source_query_id']}; {len(sp['stores'])} stores, {report.files} files, "
             f"{report.bytes:,} B)",
             f"  taken {sp['created_at']} of {sp['source']}"]
    if report.claimed_by:
        c = report.claimed_by
        lines.append(f"  CLAIMED by query {c['query_id']} ({c['checkpoint']}): its GC deletes "
                     "these files once subsumed")
    lines.append("  verified: every file present and intact" if report.verified else
                 f"  NOT VALID: {len(report.problems)} problems")
    lines += [f"    {p}" for p in report.problems]
    return "\n".join(lines)
