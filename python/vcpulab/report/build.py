"""``vcpulab report``: build the report of a results store and write it.

:func:`build_report` reads the store and makes every section in memory; :func:`write_report`
writes the page and its CSV folder so that each appears whole or not at all. Sections whose
data the store lacks are kept as one-line notes. More sections (the diagnosis) are passed in
as ``extra_sections`` and are placed before the methods.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from .. import analysis
from ..atomic import Output, OutputError
from ..store import ResultsStore, StoreError
from ..text import printable
from . import mechanisms, memory, overhead, tables
from .common import Figures
from .data import load
from .page import Section, render_page

Progress = Callable[[str], None]


class ReportError(Exception):
    """The report cannot be made (an empty store, an output that cannot be written)."""


@dataclass(frozen=True)
class Report:
    """A built report: its title, a subtitle line and its sections in page order."""

    title: str
    subtitle: str
    sections: tuple[Section, ...]

    def html(self, csv_dir: str | None = None) -> str:
        """The page; ``csv_dir`` is the CSV folder's path relative to the page (for links)."""
        return render_page(self.title, self.subtitle, self.sections, csv_dir)

    def tables(self) -> dict[str, str]:
        """CSV file name → its text, over every section."""
        out: dict[str, str] = {}
        for s in self.sections:
            for t in s.tables:
                out[f"{t.name}.csv"] = t.csv_text()
        return out


def build_report(
    store: ResultsStore,
    *,
    title: str | None = None,
    extra_sections: Sequence[Section] = (),
    command: str = "",
    thresholds: analysis.Thresholds | None = None,
    progress: Progress | None = None,
) -> Report:
    """Every section of the report of ``store``, in memory.

    ``extra_sections`` (e.g. the diagnosis) come after the built-in figures and tables and
    before the methods. ``progress(label)`` is called before each slow step.
    """
    step = progress or (lambda _label: None)
    step("reading the results")
    data = load(store)
    if not data.cells:
        raise ReportError(f"'{store.root}' holds no results yet (run `vcpulab run SPEC --results {store.root}` first)")
    th = thresholds or analysis.Thresholds()
    figs = Figures()
    generated = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections: list[Section] = [overhead.overview(data)]
    makers: list[tuple[str, Callable[[], Section | None]]] = [
        ("box plots", lambda: overhead.boxes(data, figs)),
        ("per-workload overheads", lambda: overhead.per_workload(data, figs)),
        ("host time by exit reason", lambda: overhead.host_exits(data, figs)),
        ("cycles per vCPU", lambda: overhead.vcpu_cycles(data, figs)),
        ("TLB-shootdown latency", lambda: mechanisms.tlb_cdfs(data, figs)),
        ("PLE window", lambda: mechanisms.ple_window(data, figs)),
        ("memory and NUMA", lambda: memory.memory(data, figs)),
    ]
    for label, make in makers:
        step(label)
        section = make()
        if section is not None:
            sections.append(section)
    step("categories")
    categories = analysis.categorize(store, th)
    step("speedup curves")
    sections.append(mechanisms.speedup(data, figs, categories))
    sections.append(tables.categorization(data, categories, th))
    step("summary")
    sections.append(tables.summary(data))
    published = tables.published(data)
    if published is not None:
        sections.append(published)
    from . import sensitivity

    analysed = sensitivity.section(store.root, figs)
    if analysed is not None:
        sections.append(analysed)
    sections.extend(extra_sections)
    sections.append(tables.methods(data, generated, command))
    _check_unique(sections)
    n = len(data.cells)
    subtitle = f"{n} cells from {store.root}; generated {generated}"
    return Report(title or f"vcpulab report: {store.root.resolve().name}", subtitle, tuple(sections))


def _check_unique(sections: Sequence[Section]) -> None:
    anchors: set[str] = set()
    names: set[str] = set()
    for s in sections:
        if s.anchor in anchors:
            raise ValueError(f"two report sections have the anchor {s.anchor!r}")
        anchors.add(s.anchor)
        for t in s.tables:
            if t.name in names:
                raise ValueError(f"two report tables are named {t.name!r}")
            names.add(t.name)


def csv_dir_for(out: Path) -> Path:
    """Where the CSV files of the page ``out`` go: ``report.html`` → ``report_csv/``."""
    return out.with_name(f"{out.stem}_csv")


def check_output(out: Path) -> Output:
    """One-line errors, before any work, for a page or CSV folder that cannot be written; the
    page's :class:`~vcpulab.atomic.Output` (a symbolic link is written through; a device or
    FIFO gets the page alone, and no CSV folder)."""
    try:
        page = Output(out, "-o")
    except OutputError as e:
        raise ReportError(str(e)) from None
    if not page.stream:
        csv_dir = csv_dir_for(page.target)
        if csv_dir.exists() and not _is_csv_dir(csv_dir):
            raise ReportError(
                f"cannot write the CSV files to '{printable(csv_dir)}': it exists and is not a report's CSV folder"
            )
    return page


def _is_csv_dir(path: Path) -> bool:
    return path.is_dir() and all(p.is_file() and p.suffix == ".csv" for p in path.iterdir())


def write_report(report: Report, out: str | os.PathLike[str]) -> list[Path]:
    """Write the page ``out`` and its CSV folder (:func:`csv_dir_for`); returns the paths.

    The CSV files are written into a fresh temporary folder that then replaces the old one
    (renames), and the page last, atomically: an error leaves the previous report in place."""
    output = check_output(Path(out))
    if output.stream:  # a device or FIFO: the page alone (no folder beside /dev/null)
        try:
            output.write_bytes(report.html(csv_dir_for(output.target).name).encode("utf-8"))
        except OutputError as e:
            raise ReportError(str(e)) from None
        return [output.path]
    page = output.target
    csv_dir = csv_dir_for(page)
    files = report.tables()
    tmp = Path(tempfile.mkdtemp(prefix=f".{csv_dir.name}.", dir=page.parent))
    old: Path | None = None
    swapped = False
    try:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        os.chmod(tmp, 0o777 & ~_umask())
        if csv_dir.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{csv_dir.name}.old.", dir=page.parent))
            os.replace(csv_dir, old / csv_dir.name)
        os.replace(tmp, csv_dir)
        swapped = True
        output.write_bytes(report.html(csv_dir.name).encode("utf-8"))
    except BaseException:
        shutil.rmtree(csv_dir if swapped else tmp, ignore_errors=True)
        if old is not None and (old / csv_dir.name).exists():
            os.replace(old / csv_dir.name, csv_dir)
        raise
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return [page, *(csv_dir / name for name in files)]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def progress_bar(enabled: bool) -> Iterator[Progress]:
    """A spinner with the current step on stderr when ``enabled`` (a terminal); else nothing."""
    if not enabled:
        yield lambda _label: None
        return
    from rich.progress import Progress as RichProgress
    from rich.progress import SpinnerColumn, TextColumn, TimeElapsedColumn

    from .. import text

    bar = RichProgress(
        SpinnerColumn(),
        TextColumn("report: {task.description}", markup=False),  # a step may name a workload
        TimeElapsedColumn(),
        console=text.console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task("starting", total=None)
        yield lambda label: bar.update(task, description=label)


def open_store(path: str | os.PathLike[str]) -> ResultsStore:
    """The store at ``path``, or a :class:`ReportError` saying why it cannot be read."""
    try:
        store = ResultsStore.open_existing(path)
        store.parts("runs")
    except StoreError as e:
        raise ReportError(str(e)) from None
    return store
