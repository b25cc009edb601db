"""The pack's entry point: the Pulumi CLI runs this file (`python -m pulumi.policy ADDR .` in policies/).

Constructing the PolicyPack starts its Analyzer gRPC server on 127.0.0.1, prints the port and blocks,
so the policies live in importable modules and only this file constructs the pack.
"""

from pulumi_policy import PolicyPack

from policies.pack import PACK_DESCRIPTION, PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, policies=POLICIES, description=PACK_DESCRIPTION)
