"""Software Vulkan (Mesa lavapipe) for ManiSkill/SAPIEN on machines without a GPU.

SAPIEN 3 needs a Vulkan device even for state observations. Debian 12's lavapipe (Mesa 22)
is rejected, Mesa 25 from the `<codename>-backports` suite works. `python -m
sims.maniskill.lavapipe` (run by `make maniskill`) fetches that package with apt from the
mirror the system's apt sources already use, unpacks it with `dpkg-deb -x` into
`.cache/lavapipe` (no system change, no root needed for the unpacking) and writes an ICD json
for `libvulkan_lvp.so`. SAPIEN ships its own Vulkan loader, so `libvulkan1` is not needed.

`configure()` points VK_ICD_FILENAMES at that ICD before SAPIEN is imported. On a machine with
the NVIDIA driver's Vulkan ICD, or with VK_ICD_FILENAMES already set, it changes nothing.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE = "mesa-vulkan-drivers"
NVIDIA_ICDS = ("/usr/share/vulkan/icd.d/nvidia_icd.json", "/etc/vulkan/icd.d/nvidia_icd.json",
               "/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json")  # the last: container images
LIB_DIR = "usr/lib/x86_64-linux-gnu"


def cache_dir() -> Path:
    """Where lavapipe is unpacked: $EMBODIED_LAVAPIPE_DIR or <repo>/.cache/lavapipe."""
    env = os.environ.get("EMBODIED_LAVAPIPE_DIR")
    return Path(env) if env else Path(__file__).resolve().parents[2] / ".cache" / "lavapipe"


def icd_path() -> Path:
    return cache_dir() / "lvp_icd.json"


def has_nvidia_vulkan() -> bool:
    return any(os.path.exists(p) for p in NVIDIA_ICDS)


def configure() -> str:
    """Set up the Vulkan environment for SAPIEN in this process and its children.

    Returns "env" (VK_ICD_FILENAMES was set by the user), "nvidia", "lavapipe", or "none"
    (no Vulkan driver found: ManiSkill cannot start).
    """
    os.environ.setdefault("MS_SKIP_ASSET_DOWNLOAD_PROMPT", "1")  # asset tasks fail at once
    if os.environ.get("VK_ICD_FILENAMES"):
        return "env"
    if has_nvidia_vulkan():
        icd = next(p for p in NVIDIA_ICDS if os.path.exists(p))
        if not icd.startswith(("/usr/share/", "/etc/")):  # not where the Vulkan loader looks by itself
            os.environ["VK_ICD_FILENAMES"] = os.environ["VK_DRIVER_FILES"] = icd
        return "nvidia"
    icd = icd_path()
    if not icd.exists():
        return "none"
    os.environ["VK_ICD_FILENAMES"] = str(icd)
    extra = cache_dir() / "preload.txt"  # dependencies unpacked beside lavapipe, if any
    if extra.exists():
        for lib in extra.read_text().split():
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    return "lavapipe"


# ---------------------------------------------------------------------- set-up (apt, dpkg-deb)
def mirror_uri() -> str:
    """The Debian mirror of the system's apt sources (deb822 .sources or sources.list)."""
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for block in Path(path).read_text().split("\n\n"):
            fields = dict(re.findall(r"^(\w[\w-]*):\s*(.*)$", block, re.M))
            suites = fields.get("Suites", "").split()
            if fields.get("URIs") and any(not s.endswith("-security") for s in suites):
                return fields["URIs"].split()[0]
    lists = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]
    for path in lists:
        if os.path.exists(path):
            for line in Path(path).read_text().splitlines():
                m = re.match(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line.strip())
                if m and not m.group(2).endswith("-security"):
                    return m.group(1)
    raise SystemExit("lavapipe: no Debian mirror found in /etc/apt/sources.list(.d)")


def codename() -> str:
    text = Path("/etc/os-release").read_text()
    m = re.search(r"^VERSION_CODENAME=(\S+)", text, re.M)
    if not m:
        raise SystemExit("lavapipe: /etc/os-release has no VERSION_CODENAME (not Debian?)")
    return m.group(1).strip('"')


def _apt(args: list[str], apt_dir: Path, cwd: Path | None = None) -> str:
    """Run apt-get / apt-cache against a private sources list and state folder."""
    opts = [f"-o=Dir::Etc::SourceList={apt_dir / 'sources.list'}", "-o=Dir::Etc::SourceParts=/dev/null",
            f"-o=Dir::State::Lists={apt_dir / 'lists'}", f"-o=Dir::Cache={apt_dir / 'cache'}",
            "-o=Debug::NoLocking=1", "-o=APT::Sandbox::User=root" if os.geteuid() == 0 else "-q"]
    out = subprocess.run([args[0], *opts, *args[1:]], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"lavapipe: {' '.join(args)} failed: {out.stderr.strip().splitlines()[-1:]}")
    return out.stdout


def _missing_libs(lib: Path) -> list[str]:
    out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True).stdout
    return re.findall(r"^\s*(\S+) => not found", out, re.M)


def setup(force: bool = False) -> Path | None:
    """Fetch and unpack Mesa lavapipe from backports; returns the ICD path (None on NVIDIA)."""
    if has_nvidia_vulkan() and not force:
        print("lavapipe: the NVIDIA Vulkan driver is present; nothing to do")
        return None
    root, icd = cache_dir(), icd_path()
    if icd.exists() and not force:
        print(f"lavapipe: ready ({icd})")
        return icd
    apt_dir = root / "apt"
    for sub in ("lists/partial", "cache/archives/partial", "debs"):
        (apt_dir / sub).mkdir(parents=True, exist_ok=True)
    suite = f"{codename()}-backports"
    (apt_dir / "sources.list").write_text(f"deb {mirror_uri()} {suite} main\n")
    _apt(["apt-get", "update"], apt_dir)
    _apt(["apt-get", "download", f"{PACKAGE}/{suite}"], apt_dir, cwd=apt_dir / "debs")
    unpacked = root / "root"
    for deb in glob.glob(str(apt_dir / "debs" / f"{PACKAGE}_*.deb")):
        subprocess.run(["dpkg-deb", "-x", deb, str(unpacked)], check=True)
    lib = unpacked / LIB_DIR / "libvulkan_lvp.so"
    if not lib.exists():
        raise SystemExit(f"lavapipe: {PACKAGE} from {suite} has no {LIB_DIR}/libvulkan_lvp.so")
    missing = _missing_libs(lib)
    if missing:  # dependencies the system lacks: take them from the same suite, unpacked alike
        depends = _apt(["apt-cache", "depends", f"{PACKAGE}/{suite}"], apt_dir)
        for pkg in re.findall(r"Depends: ([\w.+-]+)", depends):
            if subprocess.run(["dpkg", "-s", pkg], capture_output=True).returncode != 0:
                _apt(["apt-get", "download", f"{pkg}/{suite}"], apt_dir, cwd=apt_dir / "debs")
        for deb in glob.glob(str(apt_dir / "debs" / "*.deb")):
            subprocess.run(["dpkg-deb", "-x", deb, str(unpacked)], check=True)
        env = {**os.environ, "LD_LIBRARY_PATH": str(unpacked / LIB_DIR)}
        out = subprocess.run(["ldd", str(lib)], capture_output=True, text=True, env=env).stdout
        still = re.findall(r"^\s*(\S+) => not found", out, re.M)
        if still:
            raise SystemExit(f"lavapipe: libraries still missing: {', '.join(still)}")
        found = re.findall(r"=> (" + re.escape(str(unpacked)) + r"\S+)", out)
        (root / "preload.txt").write_text("\n".join(found) + "\n")
    api = json.loads(next((unpacked / "usr/share/vulkan/icd.d").glob("lvp_icd*.json")).read_text())
    api_version = api.get("ICD", {}).get("api_version", "1.3.0")
    with tempfile.NamedTemporaryFile("w", dir=root, delete=False) as f:
        json.dump({"file_format_version": "1.0.0",
                   "ICD": {"library_path": str(lib), "api_version": api_version}}, f)
    os.replace(f.name, icd)
    print(f"lavapipe: Mesa {PACKAGE} from {suite} unpacked; ICD {icd}")
    return icd


if __name__ == "__main__":
    setup(force="--force" in sys.argv[1:])
