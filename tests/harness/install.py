"""Installing the real harness CLIs the suite runs, at the versions in versions.toml.

Owns where the CLIs live and how they are installed: each one in its own
directory under ``<checkout>/.harness/`` (git-ignored), npm packages with
``npm install --prefix``, Hermes in a venv of its own; npm's and pip's caches
are kept under ``.harness/`` too, so nothing is cached outside the checkout.
A directory is used only once a complete install wrote its ``.installed``
marker, so a second run reuses it and a killed install is redone.

``SYNCENGINE_HARNESS_LATEST=1`` resolves every package to its newest release
(``npm view`` / ``pip index versions``) instead of the pinned version.

Run on its own to install (or check) everything: ``python -m tests.harness.install``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import attrs

CHECKOUT = Path(__file__).resolve().parents[2]
VERSIONS = Path(__file__).with_name("versions.toml")
HOME = CHECKOUT / ".harness"
MARKER = ".installed"
TIMEOUT = 900  # one install; the whole suite's budget is ~15 minutes in CI
LATEST_ENV = "SYNCENGINE_HARNESS_LATEST"


class InstallError(Exception):
    """A CLI could not be installed (the message says which and why)."""


@attrs.frozen
class Package:
    """One entry of versions.toml."""

    name: str
    version: str
    npm: str = ""
    pypi: str = ""
    bin: str = ""
    node: bool = False  # needs the [node] runtime of versions.toml

    @property
    def spec(self) -> str:
        return f"{self.npm or self.pypi}@{self.version}"


@attrs.frozen
class Installed:
    """A CLI ready to run: its executable and what its environment needs."""

    package: Package
    exe: Path
    path_dirs: tuple[Path, ...]  # prepended to PATH (a Node runtime, the venv's bin)
    seconds: float  # install time (0 when reused)
    size: int  # bytes on disk

    def env_path(self, base: str) -> str:
        return os.pathsep.join([*map(str, self.path_dirs), base])


def latest_wanted(env: dict[str, str] | None = None) -> bool:
    value = (os.environ if env is None else env).get(LATEST_ENV, "")
    return value not in ("", "0", "false", "no")


def load(latest: bool = False) -> tuple[Package, dict[str, Package]]:
    """The Node runtime and the harnesses, at their pinned (or newest) versions."""
    raw = tomllib.loads(VERSIONS.read_text())
    node = Package(name="node", **raw["node"])
    harnesses = {name: Package(name=name, **table) for name, table in raw["harness"].items()}
    if latest:
        node = attrs.evolve(node, version=_newest(node))
        harnesses = {n: attrs.evolve(p, version=_newest(p)) for n, p in harnesses.items()}
    return node, harnesses


def _run(cmd: list[str], *, env: dict[str, str] | None = None, timeout: float = TIMEOUT) -> str:
    try:
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{' '.join(cmd)}: no result after {timeout} s") from exc
    if done.returncode != 0:
        raise InstallError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-4000:]}")
    return done.stdout


def _newest(pkg: Package) -> str:
    if pkg.npm:
        return str(json.loads(_run(["npm", "view", pkg.npm, "version", "--json"], timeout=120)))
    out = _run([sys.executable, "-m", "pip", "index", "versions", pkg.pypi], timeout=120)
    found = re.search(rf"^{re.escape(pkg.pypi)} \(([^)]+)\)", out, re.M)
    if not found:
        raise InstallError(f"pip index versions {pkg.pypi}: no version in {out[:200]!r}")
    return found.group(1)


def _npm_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        npm_config_cache=str(HOME / "cache" / "npm"),
        npm_config_update_notifier="false",
        npm_config_audit="false",
        npm_config_fund="false",
    )
    return env


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total


def _target(pkg: Package) -> Path:
    return HOME / pkg.name / pkg.version


def _install_npm(pkg: Package, dest: Path, node: Installed | None) -> None:
    cmd = [
        "npm",
        "install",
        "--prefix",
        str(dest),
        "--no-save",
        "--no-package-lock",
        "--omit=dev",
        pkg.spec,
    ]
    env = _npm_env()
    if node is not None:  # install scripts and engine checks see the Node that runs it
        env["PATH"] = os.pathsep.join([str(node.exe.parent), env.get("PATH", "")])
        npm_cli = shutil.which("npm")
        if npm_cli:
            cmd = [str(node.exe), os.path.realpath(npm_cli), *cmd[1:]]
    _run(cmd, env=env)


def _install_pypi(pkg: Package, dest: Path) -> None:
    _run([sys.executable, "-m", "venv", str(dest)])
    pip = [str(dest / "bin" / "python"), "-m", "pip"]
    env = dict(
        os.environ, PIP_CACHE_DIR=str(HOME / "cache" / "pip"), PIP_DISABLE_PIP_VERSION_CHECK="1"
    )
    _run([*pip, "install", "-q", f"{pkg.pypi}=={pkg.version}"], env=env)


def _exe(pkg: Package, dest: Path) -> Path:
    if pkg.name == "node":
        return dest / "node_modules" / pkg.npm / "bin" / "node"
    if pkg.pypi:
        return dest / "bin" / pkg.bin
    return dest / "node_modules" / ".bin" / pkg.bin


def install(pkg: Package, node: Installed | None = None) -> Installed:
    """Install `pkg` unless a complete install is already there; return how to run it."""
    dest = _target(pkg)
    path_dirs = tuple(
        d
        for d in (
            node.exe.parent if node and pkg.node else None,
            dest / "bin" if pkg.pypi else None,
        )
        if d is not None
    )
    exe = _exe(pkg, dest)
    if (dest / MARKER).exists() and exe.exists():
        return Installed(pkg, exe, path_dirs, 0.0, _size(dest))
    t0 = time.monotonic()
    shutil.rmtree(dest, ignore_errors=True)  # a killed install: start over
    dest.mkdir(parents=True)
    if pkg.npm:
        _install_npm(pkg, dest, node if pkg.node else None)
    else:
        _install_pypi(pkg, dest)
    if not exe.exists():
        raise InstallError(f"{pkg.spec}: installed, but {exe} does not exist")
    (dest / MARKER).write_text(pkg.spec + "\n")
    return Installed(pkg, exe, path_dirs, time.monotonic() - t0, _size(dest))


def install_all(
    names: list[str] | None = None, *, latest: bool | None = None
) -> dict[str, Installed]:
    """Install the harnesses named (all when None), and Node when one needs it."""
    node_pkg, harnesses = load(latest_wanted() if latest is None else latest)
    wanted = {n: p for n, p in harnesses.items() if names is None or n in names}
    node = install(node_pkg) if any(p.node for p in wanted.values()) else None
    out = {n: install(p, node) for n, p in wanted.items()}
    if node is not None:
        out["node"] = node
    return out


def main() -> int:
    names = sys.argv[1:] or None
    for name, inst in install_all(names).items():
        took = f"installed in {inst.seconds:.0f} s" if inst.seconds else "already installed"
        print(f"{name:9} {inst.package.spec:40} {inst.size / 1e6:7.0f} MB  {took}  {inst.exe}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
