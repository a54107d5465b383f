"""What ships cites publications (docs/references.md) and the repository's own files, never the
project's private notes beside the repository (issue 21 item 9)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFERENCES = ROOT / "docs" / "references.md"

# Citations of files that do not ship: the private digest, the reference notes, the data file
# and anything under ../shared.
FORBIDDEN = re.compile(
    r"digest §|seeds-digest|seeds digest|reference §|\bref §|shared/docs|shared/data|\.\./shared|data/workloads\.toml"
    r"|kvm-mechanisms\.md|experiments\.md",
    re.IGNORECASE,
)
# `[KEY]` citations, looked for in docs, workload profiles and examples outside code spans (in code,
# `[N]` and usage like `[OPTIONS]` are not citations): upper-case keys, not an index `x[KEY]`, not a Markdown
# link `[KEY](...)`.
BRACKET_KEY = re.compile(r"(?<![\w\]`])\[([A-Z][A-Z0-9]{1,})\](?!\()")
# Key + locator: "TPDS §7", "DIS ch.4", "S4U Table 1", "TPDS Fig. 4".
LOCATOR_KEY = re.compile(r"\b([A-Z][A-Z0-9]{1,})(?= (?:§\d|ch\.\d|Table \d|Fig\. \d))")
# Upper-case words that are followed by "§"/"Table" in prose but are not citation keys.
NOT_KEYS = {"SDM"}


def shipped_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for pattern, base in (
        ("*.toml", "workloads"),
        ("*.toml", "examples"),
        ("*.toml", "experiments"),
        ("*.py", "python/vcpulab"),
    ):
        files += sorted((ROOT / base).rglob(pattern))
    for crate in sorted((ROOT / "crates").iterdir()):
        files += sorted((crate / "src").rglob("*.rs"))
    files += sorted(p for p in (ROOT / "tracer").rglob("*") if p.suffix in {".c", ".h"} or p.name == "Makefile")
    return [f for f in files if f.is_file()]


def defined_keys() -> set[str]:
    return set(re.findall(r"\*\*\[([A-Z][A-Z0-9]+)\]\*\*", REFERENCES.read_text(encoding="utf-8")))


def test_the_scan_covers_what_ships() -> None:
    names = {f.relative_to(ROOT).as_posix() for f in shipped_files()}
    for expected in (
        "README.md",
        "docs/spec.md",
        "workloads/parsec/dedup.toml",
        "examples/tpds.toml",
        "experiments/published/TPDS-F4.toml",
        "python/vcpulab/cli.py",
        "crates/vcpulab-sim/src/machine/costs.rs",
    ):
        assert expected in names
    assert {"TPDS", "S4U", "DIS", "BAS", "LINUX", "PARSEC", "SPLASH2X", "MEAS"} <= defined_keys()


def test_no_citation_of_files_outside_the_repository() -> None:
    found = [
        f"{f.relative_to(ROOT)}:{n}: {m.group(0)!r}"
        for f in shipped_files()
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        for m in FORBIDDEN.finditer(line)
    ]
    assert not found, "cite the publication (docs/references.md), not private notes:\n" + "\n".join(found)


def test_every_cited_key_is_in_the_references_list() -> None:
    keys = defined_keys()
    missing = []
    for f in shipped_files():
        if f == REFERENCES:
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            cited = set(LOCATOR_KEY.findall(line))
            if f.suffix in {".md", ".toml"}:
                cited |= set(BRACKET_KEY.findall(re.sub(r"`[^`]*`", "", line)))
            missing += [f"{f.relative_to(ROOT)}:{n}: {k}" for k in sorted(cited - keys - NOT_KEYS)]
    assert not missing, "keys cited but not in docs/references.md:\n" + "\n".join(missing)


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("overhead categories (digest §1.5)", True),
        ("see shared/docs/reference/kvm-mechanisms.md", True),
        ('source = "measured (ref §7)"', True),
        ("the reference §5.4 model", True),
        ("data/workloads.toml parsec.dedup", True),
        ("overhead categories (TPDS §6)", False),
        ("Sha256::digest(bytes)", False),
    ],
)
def test_the_forbidden_patterns(text: str, bad: bool) -> None:
    assert bool(FORBIDDEN.search(text)) is bad


def test_the_key_patterns() -> None:
    assert BRACKET_KEY.findall("basis = [PARSEC] and [MEAS]; x[N] `[T]` [see](a.md) [OPT](references.md#opt)") == [
        "PARSEC",
        "MEAS",
    ]
    assert LOCATOR_KEY.findall("TPDS §7, DIS ch.4, S4U Table 1, TPDS Fig. 4, Linux 4.15") == [
        "TPDS",
        "DIS",
        "S4U",
        "TPDS",
    ]
