"""Pure parsers of what the node tools print; the checks compare their results with the pool profile.

Each function takes a tool's text output and returns plain data; none runs anything. Formats:
- `nvidia-smi --query-gpu=... --format=csv,noheader`: one line per GPU, fields joined by ", ",
  unsupported values as "[N/A]" (also "[Not Supported]");
- `nvidia-smi nvlink --status`: "GPU i: NAME (UUID: ...)" then one "Link n: 26.562 GB/s" or
  "Link n: <inactive>" line per link;
- `/proc/driver/nvidia/version`: "NVRM version: NVIDIA UNIX [Open ]Kernel Module[ for ARCH]  VERSION  ...";
- kernel log lines "NVRM: Xid (PCI:0000:53:00): 79, pid=..., ..." (dmesg adds a "[  12.34]" prefix);
- `fi_info -p efa`: blocks of "provider:", "fabric:", "domain: rdmapXsY-rdm", "type:", ...; libfabric 2.x
  lists each device twice (fabrics `efa` and `efa-direct`), so devices are counted by domain;
- `ibstat`: "CA 'mlx5_0'" blocks with "Port n:" sub-blocks of "State:", "Rate:", "Link layer:";
- `/proc/meminfo`: "HugePages_Total:    2560" and "Hugepagesize:       2048 kB";
- `containerd config dump`: TOML; runtimes under the CRI plugin (containerd 1.x `io.containerd.grpc.v1.cri`,
  2.x `io.containerd.cri.v1.runtime`);
- Prometheus text exposition from the DCGM exporter.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass

__all__ = [
    "GpuRow",
    "IbPort",
    "RemapRow",
    "BurnInRow",
    "ParseError",
    "parse_version",
    "parse_driver_version",
    "parse_gpu_rows",
    "parse_remapped_rows",
    "parse_nvlink_status",
    "link_is_up",
    "parse_xids",
    "parse_efa_devices",
    "parse_ibstat",
    "parse_hugepages_mib",
    "parse_memlock",
    "parse_nvidia_runtimes",
    "metric_samples",
    "parse_burn_in",
]

NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]")


class ParseError(ValueError):
    """The tool answered, but not in the format this parser knows."""


def parse_version(text: str) -> tuple[int, ...]:
    """'550.54.15' -> (550, 54, 15): compared as integers, so 550.100 > 550.54."""
    if not re.fullmatch(r"\d+(\.\d+)*", text):
        raise ParseError(f"{text!r} is not a version such as 550.54.15")
    return tuple(int(part) for part in text.split("."))


_NVRM = re.compile(r"^NVRM version:.*?Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)\s", re.MULTILINE)


def parse_driver_version(text: str) -> str:
    """The loaded kernel module's version from /proc/driver/nvidia/version."""
    if (m := _NVRM.search(text + " ")) is None:
        raise ParseError("no 'NVRM version: ... Kernel Module VERSION' line")
    return m.group(1)


@dataclass(frozen=True, slots=True)
class GpuRow:
    """One line of the GPU query; fields hold nvidia-smi's text ("Enabled", "[N/A]")."""

    index: int
    name: str
    bus_id: str
    driver_version: str
    persistence_mode: str
    ecc_mode: str
    pcie_gen_max: str
    pcie_width: str
    mig_mode: str


def parse_gpu_rows(text: str, fields: tuple[str, ...]) -> list[GpuRow]:
    """Rows of `nvidia-smi --query-gpu=<fields> --format=csv,noheader`, fields in GpuRow order."""
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        values = [v.strip() for v in line.split(", ")]
        if len(values) != len(fields) or not values[0].isdigit():
            raise ParseError(f"line {n}: expected {len(fields)} fields ({', '.join(fields)}), got {line!r}")
        rows.append(GpuRow(int(values[0]), *values[1:]))
    return rows


@dataclass(frozen=True, slots=True)
class RemapRow:
    bus_id: str
    correctable: str
    uncorrectable: str
    pending: bool
    failure: bool


def _flag(value: str) -> bool:
    """nvidia-smi prints remap flags as 0/1 (CSV) or No/Yes (-q); N/A counts as not set."""
    if value in ("1", "Yes"):
        return True
    if value in ("0", "No") or value in NOT_AVAILABLE:
        return False
    raise ParseError(f"{value!r} is not a remap flag (0/1, No/Yes)")


def parse_remapped_rows(text: str) -> list[RemapRow]:
    """`nvidia-smi --query-remapped-rows=gpu_bus_id,remapped_rows.correctable,remapped_rows.uncorrectable,
    remapped_rows.pending,remapped_rows.failure --format=csv,noheader`."""
    rows = []
    for line in filter(str.strip, text.splitlines()):
        values = [v.strip() for v in line.split(", ")]
        if len(values) != 5:
            raise ParseError(f"expected 5 remapped-rows fields, got {line!r}")
        rows.append(RemapRow(values[0], values[1], values[2], _flag(values[3]), _flag(values[4])))
    return rows


_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_LINK = re.compile(r"^\s+Link (\d+): (.+?)\s*$")


def parse_nvlink_status(text: str) -> dict[int, dict[int, str]]:
    """GPU index -> link number -> state text ("26.562 GB/s" or "<inactive>")."""
    gpus: dict[int, dict[int, str]] = {}
    current: dict[int, str] | None = None
    for line in text.splitlines():
        if m := _NVLINK_GPU.match(line):
            current = gpus.setdefault(int(m.group(1)), {})
        elif (m := _NVLINK_LINK.match(line)) and current is not None:
            current[int(m.group(1))] = m.group(2)
    return gpus


def link_is_up(state: str) -> bool:
    """A link is up when nvidia-smi reports a non-zero speed for it."""
    m = re.match(r"^([\d.]+) GB/s$", state)
    return m is not None and float(m.group(1)) > 0


_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+),")


def parse_xids(text: str) -> list[tuple[str, int]]:
    """(PCI address, XID) for every XID event in a kernel log, in log order."""
    return [(m.group(1), int(m.group(2))) for m in _XID.finditer(text)]


def parse_efa_devices(text: str) -> list[str]:
    """Distinct EFA devices in `fi_info -p efa` output, by domain name without its -rdm/-dgrm suffix."""
    devices: list[str] = []
    provider = ""
    for line in text.splitlines():
        key, _, value = line.strip().partition(": ")
        if key == "provider":
            provider = value
        elif key == "domain" and provider == "efa":
            device = re.sub(r"-(rdm|dgrm)$", "", value)
            if device not in devices:
                devices.append(device)
    return devices


@dataclass(frozen=True, slots=True)
class IbPort:
    ca: str
    port: int
    state: str
    physical_state: str
    rate_gbps: float
    link_layer: str

    @property
    def name(self) -> str:
        return f"{self.ca}/{self.port}"


def parse_ibstat(text: str) -> list[IbPort]:
    """Every port `ibstat` lists, InfiniBand and Ethernet (RoCE) link layers alike."""
    ports: list[IbPort] = []
    ca, port = "", 0
    fields: dict[str, str] = {}

    def flush() -> None:
        if port:
            try:
                rate = float(fields.get("Rate", "0").split()[0])
            except (ValueError, IndexError):
                raise ParseError(f"{ca} port {port}: rate {fields.get('Rate')!r} is not a number") from None
            ports.append(IbPort(ca, port, fields.get("State", ""), fields.get("Physical state", ""), rate,
                                fields.get("Link layer", "")))

    for line in text.splitlines():
        if m := re.match(r"^CA '([^']+)'", line):
            flush()
            ca, port, fields = m.group(1), 0, {}
        elif m := re.match(r"^\s+Port (\d+):\s*$", line):
            flush()
            port, fields = int(m.group(1)), {}
        elif port and ":" in line:
            key, _, value = line.strip().partition(":")
            fields[key.strip()] = value.strip()
    flush()
    return ports


def parse_hugepages_mib(text: str) -> int:
    """MiB reserved as huge pages: HugePages_Total x Hugepagesize."""
    values = dict(re.findall(r"^(HugePages_Total|Hugepagesize):\s+(\d+)", text, re.MULTILINE))
    if len(values) != 2:
        raise ParseError("no HugePages_Total / Hugepagesize lines in /proc/meminfo")
    return int(values["HugePages_Total"]) * int(values["Hugepagesize"]) // 1024


def parse_memlock(text: str) -> tuple[str, str]:
    """(soft, hard) of `Max locked memory` in /proc/PID/limits (proc(5): "Limit Soft Limit Hard Limit Units"
    columns; values are a byte count or `unlimited`)."""
    m = re.search(r"^Max locked memory\s+(\S+)\s+(\S+)", text, re.MULTILINE)
    if m is None:
        raise ParseError("no 'Max locked memory' line in /proc/PID/limits")
    return m.group(1), m.group(2)


CRI_PLUGINS = ("io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime")


def parse_nvidia_runtimes(text: str) -> tuple[dict[str, str], str]:
    """(runtime name -> BinaryName for runtimes that run nvidia-container-runtime, default runtime name)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ParseError(f"containerd config is not valid TOML: {err}") from None
    found: dict[str, str] = {}
    default = ""
    for plugin in CRI_PLUGINS:
        containerd = doc.get("plugins", {}).get(plugin, {}).get("containerd", {})
        default = default or containerd.get("default_runtime_name", "")
        for name, runtime in containerd.get("runtimes", {}).items():
            binary = runtime.get("options", {}).get("BinaryName", "")
            if "nvidia-container-runtime" in binary:
                found[name] = binary
    return found, default


def metric_samples(text: str, metric: str) -> list[str]:
    """Sample lines of `metric` in a Prometheus text exposition (no HELP/TYPE lines)."""
    return [line for line in text.splitlines() if re.match(rf"^{re.escape(metric)}(\{{| )", line)]


@dataclass(frozen=True, slots=True)
class BurnInRow:
    gpu: int
    tflops: float
    bandwidth_gbs: float


def parse_burn_in(text: str) -> list[BurnInRow]:
    """The burn-in script's JSON lines; a GPU that failed to run reports {"gpu": i, "error": "..."}."""
    rows = []
    for line in filter(str.strip, text.splitlines()):
        try:
            doc = json.loads(line)
        except json.JSONDecodeError:
            raise ParseError(f"burn-in printed a line that is not JSON: {line[:120]!r}") from None
        if "error" in doc:
            raise ParseError(f"GPU {doc.get('gpu')}: {doc['error']}")
        rows.append(BurnInRow(int(doc["gpu"]), float(doc["tflops"]), float(doc["bandwidth_gbs"])))
    return rows
