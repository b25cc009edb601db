"""`make mutate`'s table (tests/mutation MODULES: each module with the tests that cover it) and every mutation run the
docs give (`MUTATE="..."`, `python -m tests.mutation ...`) name files, tests and functions that exist. After the
stack model left infra/config.py, README's `--only 'infra.config.x__gateway*'` matched no mutant and ran nothing,
silently (issue 47 item 5); mutant names are mutmut 3's `<module>.x_<function>__mutmut_<n>` (tests/mutation
`functions`)."""

from __future__ import annotations

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.mutation.__main__ import MODULES, functions, stale_filters

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "CONTRIBUTING.md", "Makefile", *(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
        "tests/mutation/__main__.py", "tests/mutation/SCORES.md")
VALUED = {"--only", "--sample", "--seed", "--max-children", "--tests"}  # the runner's options that take a value
RUNS = re.compile(r"""MUTATE="([^"]+)"|python -m tests\.mutation((?: +(?:'[^']*'|[^\s`'#]+))*)""")


def _runs() -> list[tuple[str, list[str], list[str]]]:
    """(where, modules, --only patterns) of every mutation run the docs give; placeholders (MODULE, NAME) left out."""
    found = []
    for doc in DOCS:
        for m in RUNS.finditer((ROOT / doc).read_text()):
            args = shlex.split(m.group(1) or m.group(2) or "")
            modules, only = [], []
            for i, arg in enumerate(args):
                if arg == "--only" and "." in args[i + 1]:
                    only.append(args[i + 1])
                elif not arg.startswith("-") and (i == 0 or args[i - 1] not in VALUED) and arg.endswith(".py"):
                    modules.append(arg)
            found.append((doc, modules, only))
    return found


def test_the_table_names_modules_and_tests_that_exist() -> None:
    for module, tests in MODULES.items():
        assert functions(module), f"{module}: no function to mutate"
        for test in tests:
            path, _, name = test.partition("::")
            assert (ROOT / path).is_file(), f"{module}: {path} does not exist"
            defined = {n.name for n in ast.parse((ROOT / path).read_text()).body if isinstance(n, ast.FunctionDef)}
            assert not name or name in defined, f"{module}: {test} does not exist"


def test_every_mutation_run_the_docs_give_names_modules_and_functions_that_exist() -> None:
    runs = _runs()
    assert ("README.md", ["infra/stack/gateway.py"], ["infra.stack.gateway.x__gateway*"]) in runs
    assert ("tests/mutation/__main__.py", ["infra/stack/declared.py"], ["infra.stack.declared.x_values*"]) in runs
    for doc, modules, only in runs:
        assert set(modules) <= set(MODULES), f"{doc}: {sorted(set(modules) - set(MODULES))} not in MODULES"
        assert stale_filters(modules or list(MODULES), tuple(only)) == [], doc


def test_a_pattern_that_names_no_function_of_its_module_is_refused_with_where_it_is_now() -> None:
    res = subprocess.run([sys.executable, "-m", "tests.mutation", "infra/config.py", "--only",
                          "infra.config.x__gateway*"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         check=False)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr == ("--only 'infra.config.x__gateway*' names no function of infra/config.py; did you mean "
                          "infra/stack/gateway.py --only 'infra.stack.gateway.x__gateway*'?\n")


def test_methods_are_named_as_mutmut_names_them() -> None:
    """mutmut 3.8.1 (__main__.py mangle_function_name): `x_<function>`, `xǁ<Class>ǁ<method>`."""
    assert "dashboards.rule_parts.x\u01c1R\u01c1vllm_bucket" in functions("dashboards/rule_parts.py")
    mutant = "dashboards.rule_parts.x\u01c1R\u01c1vllm_bucket__mutmut_5"
    assert stale_filters(["dashboards/rule_parts.py"], (mutant,)) == []
