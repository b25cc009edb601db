"""A stand-in for kubectl that answers from recordings: `replay_kubectl.py KIND[+CASE] [kubectl args...]`.

`get pods ... -l app=nvidia-dcgm-exporter -o json` prints kubectl-get-pods-dcgm-exporter.json of KIND/CASE/,
else of KIND/healthy/; `get pod NAME -n NS -o json` prints kubectl-get-pod-NAME.json. A missing recording
answers like kubectl does for a missing object: exit 1 and a message on stderr.
"""

from __future__ import annotations

import sys
from pathlib import Path

RECORDINGS = Path(__file__).resolve().parent / "recordings"


def main(argv: list[str]) -> int:
    kind, _, case = argv[1].partition("+")
    args = [a for a in argv[2:] if not a.startswith("--")]
    if args[:2] == ["get", "pods"]:
        # only what node-check asks: the GPU operator's exporter pods (namespace gpu-operator, label
        # app=nvidia-dcgm-exporter on the operator's DaemonSet pods)
        if args[2:] != ["-n", "gpu-operator", "-l", "app=nvidia-dcgm-exporter", "-o", "json"]:
            print(f"replay_kubectl: recorded only the exporter pods, not: {' '.join(args)}", file=sys.stderr)
            return 1
        name = "kubectl-get-pods-dcgm-exporter.json"
    elif args[:2] == ["get", "pod"]:
        name = f"kubectl-get-pod-{args[2]}.json"
    else:
        print(f"replay_kubectl: no recording for {' '.join(args)}", file=sys.stderr)
        return 1
    for folder in ([case] if case else []) + ["healthy"]:
        path = RECORDINGS / kind / folder / name
        if path.is_file():
            sys.stdout.write(path.read_text())
            return 0
    print(f'Error from server (NotFound): {name} not recorded for {argv[1]}', file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
