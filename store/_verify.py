"""Verification: re-hash stored bytes against a manifest and name what is damaged."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ticktensor.errors import StoreCorruptError

from ._location import Location
from ._manifest import FileEntry, Manifest, sha256_hex

__all__ = ["VerifyReport", "verify_manifest"]


@dataclass
class VerifyReport:
    """What a verification checked; ``problems`` is empty when everything matched."""

    version: int
    files_checked: int = 0
    bytes_checked: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _expected_files(manifest: Manifest) -> list[tuple[str, str, FileEntry]]:
    """(what, path, entry) for every stored file, ``what`` naming segment and chunk."""
    out = []
    for seg in manifest.segments:
        for name, entry in seg.files.items():
            out.append(
                (f"segment {seg.symbol}/{seg.session} chunk {name}", f"{seg.path}/{name}", entry)
            )
    for pack in manifest.packs:
        for name, entry in pack.files.items():
            out.append((f"pack {pack.session} file {name}", f"{pack.path}/{name}", entry))
    out.extend(
        (f"{tab.kind} table {tab.symbol}/{tab.session}", tab.path, tab.file)
        for tab in manifest.tables
    )
    return out


def verify_manifest(
    location: Location,
    manifest: Manifest,
    manifest_rel: str,
    manifest_sha256: str,
    on_file: Callable[[str, int], None] | None = None,
) -> VerifyReport:
    """Check the manifest's own hash, then every file it lists.

    Raises :class:`StoreCorruptError` listing every problem, after checking all files.
    """
    report = VerifyReport(version=manifest.version)
    data = location.read_bytes(manifest_rel)
    if sha256_hex(data) != manifest_sha256:
        report.problems.append(
            (
                manifest_rel,
                f"manifest sha256 {sha256_hex(data)[:16]} != recorded {manifest_sha256[:16]}",
            )
        )
    for what, rel, entry in _expected_files(manifest):
        try:
            blob = location.read_bytes(rel)
        except FileNotFoundError:
            report.problems.append((rel, f"{what}: file is missing"))
            continue
        report.files_checked += 1
        report.bytes_checked += len(blob)
        digest = sha256_hex(blob)
        if len(blob) != entry.bytes or digest != entry.sha256:
            report.problems.append(
                (
                    rel,
                    f"{what}: content hash mismatch (manifest sha256 {entry.sha256[:16]}..., "
                    f"{entry.bytes} bytes; stored {digest[:16]}..., {len(blob)} bytes)",
                )
            )
        if on_file is not None:
            on_file(rel, len(blob))
    if report.problems:
        lines = "\n".join(f"  {location.display(rel)}: {why}" for rel, why in report.problems)
        raise StoreCorruptError(
            f"store version {manifest.version} is damaged: {len(report.problems)} problem(s)\n"
            f"{lines}",
            problems=report.problems,
        )
    return report
