"""Where the bridge's native artifacts are: the pathology workloads (``bin/``) and the
LD_PRELOAD libraries (``lib/``), built by ``make native`` into ``target/native`` of the
repository (or wherever ``VCPULAB_NATIVE`` points)."""

from __future__ import annotations

import os
from pathlib import Path

from .launch import LaunchError


def native_dir() -> Path:
    env = os.environ.get("VCPULAB_NATIVE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3] / "target" / "native"


def library(name: str) -> Path:
    """An LD_PRELOAD library (``libvtrace.so``), or a LaunchError saying how to build it."""
    path = native_dir() / "lib" / name
    if not path.is_file():
        raise LaunchError(f"{path}: not built (run `make native` in the vcpulab repository, or set VCPULAB_NATIVE)", 2)
    return path


def program(name: str) -> Path:
    """A pathology workload (``spin_barrier``), or a LaunchError saying how to build it."""
    path = native_dir() / "bin" / name
    if not path.is_file():
        raise LaunchError(f"{path}: not built (run `make native` in the vcpulab repository, or set VCPULAB_NATIVE)", 2)
    return path
