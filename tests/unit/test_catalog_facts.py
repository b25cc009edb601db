"""The instance catalog against AWS's published instance table (tests/fixtures/aws_instance_types.yaml).

The fixture is written from EC2's DescribeInstanceTypes answers and names the AWS documentation page of each
row; it is never generated from components/catalog.py. A wrong number of network cards or EFA interfaces
in the catalog gives EFA launch templates EC2 rejects (a card index the type lacks) or nodes that use a
fraction of their fabric, and node acceptance then expects the wrong device count.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from components import catalog

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aws_instance_types.yaml"
AWS: dict[str, Any] = yaml.safe_load(FIXTURE.read_text())
CLOUD_TYPES = sorted(n for n, t in catalog.CATALOG.items() if not t.onprem)


def test_every_cloud_type_of_the_catalog_has_a_row_in_the_aws_table() -> None:
    """A type added to the catalog needs its published facts written down here too."""
    assert sorted(AWS["types"]) == CLOUD_TYPES
    assert all(row["doc"] in AWS["sources"] for row in AWS["types"].values())


@pytest.mark.parametrize("name", CLOUD_TYPES)
def test_network_cards_and_efa_interfaces_are_what_aws_publishes(name: str) -> None:
    """network_cards is EC2's MaximumNetworkCards (the EFA layout gives every card one interface) and
    efa_devices is MaximumEfaInterfaces (what the node shows and what pods request); e.g. p6-b200.48xlarge has
    8 cards and 8 EFA interfaces, p5en.48xlarge 16, p5.48xlarge 32."""
    row, entry = AWS["types"][name], catalog.get(name)
    assert (entry.network_cards, entry.efa_devices) == (row["network_cards"], row["max_efa_interfaces"])
    assert entry.supports_efa is (row["max_efa_interfaces"] > 0)


@pytest.mark.parametrize("name", CLOUD_TYPES)
def test_size_and_gpus_are_what_aws_publishes(name: str) -> None:
    """vCPUs, memory and GPU count exactly; the GPU model by AWS's name for it; per-GPU memory within what
    AWS's MiB figure reads as in binary (GiB) or decimal (GB) units, the two ways vendors quote it."""
    row, entry = AWS["types"][name], catalog.get(name)
    assert (entry.vcpus, entry.memory_gib * 1024, entry.gpu_count) == (row["vcpus"], row["memory_mib"], row["gpus"])
    if row["gpus"] == 0:
        assert entry.gpu is None
        return
    assert entry.gpu is not None
    assert row["gpu_name"] in entry.gpu.name.lower()
    mib = row["gpu_memory_mib"]
    assert math.floor(mib / 1024) <= entry.gpu.memory_gib <= math.ceil(mib * 2**20 / 1e9)
