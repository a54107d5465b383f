"""The synthetic input generators in tracer/inputs/: same bytes on every run, --help, and their errors.

Each generator runs at its smallest valid --scale (a few files of a few KB), so the whole file takes
seconds. The two water programs extend the mirror's random.in (from its simdev tar) and are skipped,
naming the tar, where the mirror is not on this machine.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INPUTS = REPO / "tracer" / "inputs"
MIRROR = Path("/work/real/src")

# generator: (the smallest --scale that is valid, or one just above where it starts extending
# random.in; the mirror tar to extract into OUTDIR first, or None)
GENERATORS: dict[str, tuple[str, str | None]] = {
    "barnes": ("0.001", None),  # 16 bodies
    "fmm": ("0.001", None),  # 16 particles
    "canneal": ("0.001", None),  # 20 elements
    "freqmine": ("0.001", None),  # 20 transactions
    "dedup": ("0.01", None),  # about 84 KB
    "ferret": ("0.001", None),  # 1 query image
    "vips": ("0.001", None),  # 256 x 256
    "x264": ("0.001", None),  # 64 x 48, 80 frames
    "water_nsquared": ("1.25", "ext/splash2x/apps/water_nsquared/inputs/input_simdev.tar"),  # 640 > 588 molecules
    "water_spatial": ("0.2", "ext/splash2x/apps/water_spatial/inputs/input_simdev.tar"),  # 819 molecules
}

# an out-of-range --scale, and the start of the one-line error it gives (exit 1)
BAD_SCALE: dict[str, tuple[str, str]] = {
    "barnes": ("0", "--scale 0 gives 0 bodies (need at least 16)"),
    "fmm": ("0", "--scale 0 gives 0 particles (need at least 16)"),
    "canneal": ("0", "--scale gives 0 elements; it must give 10..10000000"),
    "freqmine": ("0", "--scale gives 0 transactions; it must give 1..10000000"),
    "dedup": ("0", "--scale must be between 0.01 and 100"),
    "ferret": ("0", "--scale must be a positive number"),
    "vips": ("0", "--scale must be a positive number"),
    "x264": ("0", "--scale must be a positive number"),
    "water_nsquared": ("0", "--scale 0 gives 0 molecules (need at least 8)"),
    "water_spatial": ("0", "--scale 0 gives 0 molecules (need at least 8)"),
}

NAMES = sorted(GENERATORS)


def generate(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(INPUTS / f"{name}.py"), *args], cwd=REPO, capture_output=True, text=True, timeout=120
    )


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def outdir(name: str, where: Path) -> Path:
    """OUTDIR for name: empty, or holding the mirror's simdev files (skip if the mirror is missing)."""
    tar = GENERATORS[name][1]
    where.mkdir()
    if tar is not None:
        if not (MIRROR / tar).is_file():
            pytest.skip(f"{name} needs the mirror's {MIRROR / tar} (its random.in), not on this machine")
        with tarfile.open(MIRROR / tar) as t:
            t.extractall(where, filter="data")
    return where


@pytest.mark.parametrize("name", NAMES)
def test_two_runs_give_the_same_bytes(name: str, tmp_path: Path) -> None:
    scale = GENERATORS[name][0]
    runs = []
    for i in (1, 2):
        d = outdir(name, tmp_path / f"run{i}")
        r = generate(name, str(d), "--scale", scale)
        assert r.returncode == 0, r.stderr
        assert r.stderr == ""
        runs.append(digests(d))
    assert runs[0] == runs[1]
    made = [f for f in runs[0] if f not in ("input.template", "random.in")]
    assert made and not [f for f in made if f.endswith(".tmp")], runs[0]
    if GENERATORS[name][1] is not None:
        # it rewrites random.in in place; running it again on its own output changes nothing
        again = generate(name, str(tmp_path / "run1"), "--scale", scale)
        assert again.returncode == 0, again.stderr
        assert digests(tmp_path / "run1") == runs[0]


@pytest.mark.parametrize("name", NAMES)
def test_help_exits_0(name: str) -> None:
    r = generate(name, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: {name}.py [-h] [--scale ")
    assert "--scale" in r.stdout and r.stderr == ""


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_argument_is_a_usage_error_exit_2(name: str, tmp_path: Path) -> None:
    r = generate(name, str(tmp_path / "out"), "--bogus")
    assert r.returncode == 2
    assert r.stdout == ""
    usage, error = r.stderr.splitlines()
    assert usage.startswith(f"usage: {name}.py ")
    assert error == f"{name}.py: error: unrecognized arguments: --bogus"
    assert not (tmp_path / "out").exists()
    r = generate(name, str(tmp_path / "out"), "--scale", "abc")
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == f"{name}.py: error: argument --scale: expected a number (got 'abc')"
    for bad in ("nan", "inf", "1e300"):
        r = generate(name, str(tmp_path / "out"), "--scale", bad)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.splitlines()[-1].endswith(f"expected a finite number of at most 1000 (got '{bad}')")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_scale_or_outdir_is_one_line_exit_1(name: str, tmp_path: Path) -> None:
    scale, message = BAD_SCALE[name]
    r = generate(name, str(tmp_path / "out"), "--scale", scale)
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"{name}.py: {message}\n")
    assert not (tmp_path / "out").exists()
    (tmp_path / "file").write_text("")
    r = generate(name, str(tmp_path / "file" / "out"), "--scale", GENERATORS[name][0])
    assert (r.returncode, r.stdout, r.stderr) == (1, "", f"{name}.py: {tmp_path / 'file' / 'out'}: Not a directory\n")
