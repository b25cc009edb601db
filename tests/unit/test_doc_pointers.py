"""Every pointer from code to a section of the kit's own docs resolves: `README.md, "Section"`, `docs/x.md 'Section'`
(README's detail moved to docs/ pages and left pointers to sections that were gone: issue 47 item 5).

Read from the Python sources' strings (messages, docstrings) and comments, and from the stack files' comments. A
pointer names a markdown file and, quoted after it, a section: a heading of that file (`## Section ...`) or a
paragraph's bold lead (`**Section.**`), the pointer being the heading's start. Markdown links between the docs are
checked by tests/unit/test_docs.py."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# `<file>.md` or a bare README, then a section in quotes; not part of a longer name or an upstream path@tag:file.
POINTER = re.compile(r"""(?<![\w@:./-])((?:[\w.-]+/)*(?:README(?:\.md)?|[\w-]+\.md))[,:]?\s+(["'])(.+?)\2""", re.S)

# Pointers into other projects' files that read like the kit's: (source file, section) -> whose it is.
UPSTREAM = {
    ("components/aws/nodes.py", "Kubernetes metadata"): "aws-ebs-csi-driver docs/install.md",
    ("components/k8s/engines/triton.py", "Tool Calling"): "triton-inference-server/server python/openai/README.md",
    ("tests/unit/test_triton_tool_calls.py", "Tool Calling"): "triton-inference-server/server python/openai/README.md",
    ("tests/unit/test_engine_contracts.py", "r26.07"): "triton-inference-server/server README.md",
    ("tests/unit/test_bringup.py", "Auto-Discovery Setup"): "kubernetes/autoscaler cluster-autoscaler AWS README",
}


def _texts(path: Path) -> list[str]:
    """A file's prose: for Python its string constants (f-strings' literal parts) and its comment blocks; for YAML
    its comment blocks."""
    source = path.read_text()
    if "README" not in source and ".md" not in source:
        return []
    if path.suffix != ".py":
        lines = [line.split("#", 1)[1] if "#" in line else "\n" for line in source.splitlines()]
        return " ".join(lines).split("\n")
    nodes = list(ast.walk(ast.parse(source)))
    joined = [n for n in nodes if isinstance(n, ast.JoinedStr)]
    parts = {id(v) for n in joined for v in n.values}
    texts = [n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in parts]
    texts += ["".join(v.value if isinstance(v, ast.Constant) else "{}" for v in n.values) for n in joined]
    block: list[str] = []
    last = -1
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            if tok.start[0] != last + 1 and block:
                texts.append(" ".join(block))
                block = []
            block.append(tok.string.lstrip("#"))
            last = tok.start[0]
    return [*texts, " ".join(block)]


def _sections(page: Path) -> list[str]:
    """A markdown file's headings and bold paragraph leads, outside code blocks."""
    found, fenced = [], False
    for line in page.read_text().splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (m := re.match(r"#{1,6} (.+)|\*\*(.+?)\*\*", line)):
            found.append(m.group(1) or m.group(2))
    return found


def _plain(text: str) -> str:
    return " ".join(text.replace("`", "").split()).rstrip(".").lower()


def pointers() -> list[tuple[str, str, str]]:
    """(source file, markdown file, section) of every pointer in the kit's sources and stack files."""
    files = subprocess.run(["git", "ls-files", "*.py", "stacks/*.yaml"], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout.split()
    found = []
    for name in files:
        if ROOT / name == Path(__file__).resolve():
            continue  # this file's examples
        for text in _texts(ROOT / name):
            for m in POINTER.finditer(" ".join(text.split())):
                found.append((name, m.group(1), m.group(3)))
    return found


def test_every_pointer_to_a_section_of_the_kits_docs_names_a_section_there() -> None:
    found = pointers()
    assert ("infra/nodecheck/checks.py", "docs/serving.md", "Locked memory for RDMA") in found
    assert ("infra/commands.py", "README.md", "Running `pulumi up` for real") in found
    assert ("telemetry/runs.py", "docs/telemetry.md", "What carries the workflow") in found
    stale = []
    for source, page, section in found:
        if (source, section) in UPSTREAM:
            continue
        path = ROOT / (page if page.endswith(".md") else "README.md")
        if not path.is_file() and "/" in page and not page.startswith("docs/"):
            continue  # another project's file by its path there (python/openai/README.md, content/en/docs/...)
        sections = _sections(path) if path.is_file() else []
        if not any(_plain(s).startswith(_plain(section)) for s in sections):
            stale.append(f"{source}: {page}, {section!r}")
    assert stale == []


def test_a_pointer_to_a_section_that_moved_is_found(tmp_path: Path) -> None:
    """The scan itself: a message, a docstring and a comment pointing at README sections, one of them gone."""
    code = tmp_path / "m.py"
    code.write_text('"""See README.md, "Quick start"."""\n# and README "Fidelity" for the gate\n'
                    'MSG = f"see docs/gateway.md, \'Requests on a replica that hangs\' ({1})"\n')
    found = [(page, section) for text in _texts(code) for m in POINTER.finditer(" ".join(text.split()))
             for page, section in [(m.group(1), m.group(3))]]
    assert sorted(found) == [("README", "Fidelity"), ("README.md", "Quick start"),
                             ("docs/gateway.md", "Requests on a replica that hangs")]
    readme = _sections(ROOT / "README.md")
    assert any(_plain(s).startswith("quick start") for s in readme)
    assert not any(_plain(s).startswith("fidelity") for s in readme)
