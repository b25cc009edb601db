"""`make mutate`: mutation testing (mutmut 3) of the modules that encode decisions, each with the tests that cover it.

Not part of CI (slow). Each module runs in its own scratch copy of the tracked tree (build/mutate/<name>/), so
mutmut's config and its mutants/ folder never touch the worktree. Prints one line per module: mutants killed /
total and the score, then the surviving mutants (`mutmut show <name>` in that copy shows each diff).

    python -m tests.mutation                       # every module below
    python -m tests.mutation telemetry/critical_path.py policies/fabric.py
    python -m tests.mutation infra/stack/declared.py --only 'infra.stack.declared.x_values*'  # some mutants only

A run narrowed with --only scores the mutants it checked; the others stay "not checked" and out of the total. A
pattern that names no function of the modules run (a function that moved) is refused, with the module it is in now.

A module whose whole run takes hours can be estimated from a sample instead:

    python -m tests.mutation infra/stack/models.py --sample 200 --seed 22 --max-children 1

mutmut first generates all of the module's mutants (no test runs), `mutmut results --all true` lists their names
("not checked"), and random.Random(SEED).sample over the sorted names picks N of them (with --only, N of the
matching ones); only those run. The line then reads killed/checked of N sampled from the total, with the Wilson 95%
interval of the module's score (tests/mutation/sampling.py). The same seed on the same code picks the same mutants.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from tests.mutation.sampling import sample_names, wilson_interval

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "build" / "mutate"
# The tests of the stack model (infra/config.py and infra/stack/): its error messages, bounds and every key.
_STACK_MODEL_TESTS = ("tests/unit/test_config.py", "tests/unit/test_config_bounds.py",
                      "tests/unit/test_config_reader.py", "tests/unit/test_config_gateway.py",
                      "tests/unit/test_config_every_key.py", "tests/unit/test_config_declared.py",
                      "tests/unit/test_bringup.py", "tests/unit/test_serving_fabric.py",
                      "tests/unit/test_envoy_variants.py", "tests/unit/test_gateway.py",
                      "tests/unit/test_fidelity_eval.py", "tests/unit/test_k8s_observability.py",
                      "tests/unit/test_cli.py::test_misspelt_namespace_is_refused_under_pulumi_up",
                      "tests/unit/test_fidelity_job.py::test_job_config_errors_name_the_key_path")
# module -> the tests that cover it (mutmut runs, per mutant, the subset of these that executes the mutated function)
MODULES: dict[str, tuple[str, ...]] = {
    "policies/fabric.py": ("tests/unit/test_policies.py", "tests/unit/test_policy_efa_security_group.py",
                           "tests/unit/test_policy_fabric_cases.py"),
    "policies/isolation.py": ("tests/unit/test_policies.py", "tests/unit/test_policies_isolation_reading.py"),
    "policies/kube.py": ("tests/unit/test_policies.py", "tests/unit/test_policies_kube_reading.py"),
    "policies/aws_security.py": ("tests/unit/test_policies.py", "tests/unit/test_policies_s3.py",
                                 "tests/unit/test_policies_aws_reading.py"),
    # rules.py assembles the rules; rule_parts.py (Record, Alert, the recorded names) and gateway_alerts.py were
    # split from it, and the same tests state what they build
    **dict.fromkeys(("dashboards/rules.py", "dashboards/rule_parts.py", "dashboards/gateway_alerts.py"), (
        "tests/artifacts/test_rules.py", "tests/artifacts/test_rules_burn_rate.py",
        "tests/artifacts/test_upstream_metric_names.py", "tests/artifacts/test_dashboards.py",
        "tests/artifacts/test_rules_thresholds_and_texts.py", "tests/artifacts/test_variant_panels.py")),
    # the gateway's bootstrap: config.py assembles it from the builders of the other envoy/ modules (split from it,
    # issue 30); the same tests run the result through Envoy
    **dict.fromkeys((f"components/k8s/gateway/envoy/{name}.py" for name in (
        "config", "base", "variants", "affinity", "callers", "refusals", "observability")), (
        "tests/unit/test_gateway.py", "tests/unit/test_envoy_values.py", "tests/artifacts/test_envoy_validate.py",
        "tests/artifacts/test_envoy_live.py", "tests/artifacts/test_upstream_metric_names.py",
        "tests/unit/test_envoy_variants.py", "tests/artifacts/test_envoy_issuer_tenants_live.py")),
    "telemetry/critical_path.py": ("tests/unit/test_telemetry_critical_path.py",
                                   "tests/unit/test_critical_path_window.py"),
    "infra/nodecheck/checks.py": ("tests/node/test_nodecheck_replay.py", "tests/unit/test_nodecheck_parsers.py",
                                  "tests/node/test_nodecheck_real_node.py",
                                  "tests/node/test_nodecheck_fault_recordings.py"),
    "infra/config.py": _STACK_MODEL_TESTS,
    # The stack model's reading and checks, moved out of infra/config.py (issue 30): the same tests cover them.
    **{f"infra/stack/{name}.py": _STACK_MODEL_TESTS
       for name in ("declared", "reader", "messages", "common", "cluster", "pools", "tenants", "models", "gateway",
                    "observability", "checks")},
}
PACKAGES = ("components", "dashboards", "infra", "policies", "telemetry")
# What tests read besides the packages (mutmut copies tests/, setup.cfg and pyproject.toml itself): the shipped
# stacks (tests synth them), the Pulumi project file, README.md and docs/ (tests check their tables) and
# .venv/bin/envoy (the Envoy tests run ROOT/.venv/bin/envoy; the scratch copy gets that one launcher, which runs
# the worktree's venv).
ALSO_COPY = ("stacks", "Pulumi.yaml", ".venv/bin", "README.md", "docs")
STATUS = re.compile(r"^\s*(?P<name>\S+): (?P<status>killed|survived|timeout|suspicious|skipped|no tests|"
                    r"segfault|not checked|caught by type check)\s*$")


def _dotted(module: str) -> str:
    return module.removesuffix(".py").replace("/", ".")


def functions(module: str) -> list[str]:
    """What mutmut 3 names the functions of `module` (a path) in its mutants' names, `<name>__mutmut_<n>`: a
    function `pkg.mod.x_f`, a method `pkg.mod.xǁClassǁm` (mutmut 3.8.1 __main__.py mangle_function_name; the module
    part is the path's)."""
    dotted = _dotted(module)
    defs = (ast.FunctionDef, ast.AsyncFunctionDef)
    names = []
    for node in ast.parse((ROOT / module).read_text()).body:
        if isinstance(node, defs):
            names.append(f"{dotted}.x_{node.name}")
        elif isinstance(node, ast.ClassDef):
            names += [f"{dotted}.x\u01c1{node.name}\u01c1{m.name}" for m in node.body if isinstance(m, defs)]
    return names


def stale_filters(modules: list[str], patterns: tuple[str, ...]) -> list[str]:
    """A problem for each --only pattern that names no function of `modules` (it would run no mutant), with the
    module of MODULES that has that function now, if one does."""
    names = [n for m in modules for n in functions(m)]
    problems = []
    for pattern in patterns:
        mutant = re.sub(r"__mutmut_\d+$", "__mutmut_*", pattern)  # a mutant of the function, whatever its number
        if any(fnmatch.fnmatchcase(f"{n}__mutmut_1", mutant) for n in names):
            continue
        tail = pattern.rsplit(".", 1)[-1]
        function = re.sub(r"(__mutmut_\d+|\*)$", "", tail)  # `x__gateway*`: the function `_gateway`
        elsewhere = [f"{m} --only '{_dotted(m)}.{tail}'" for m in MODULES
                     if f"{_dotted(m)}.{function}" in functions(m)]
        where = ", ".join(modules) if len(modules) <= 3 else f"the {len(modules)} modules run"
        problems.append(f"--only {pattern!r} names no function of {where}"
                        + (f"; did you mean {' or '.join(elsewhere)}?" if elsewhere else ""))
    return problems


def _copy_tree(dest: Path) -> None:
    """The tracked files (and untracked, not ignored ones) into `dest`, fresh."""
    if dest.exists():
        shutil.rmtree(dest)
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split("\n")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


def _config(module: str, tests: tuple[str, ...]) -> str:
    quoted = "\n    ".join  # setup.cfg: one list item per line
    return (f"[mutmut]\nsource_paths =\n    {quoted(PACKAGES)}\nonly_mutate =\n    {module}\n"
            f"pytest_add_cli_args_test_selection =\n    {quoted(tests)}\n"
            f"also_copy =\n    {quoted(ALSO_COPY)}\n"
            "pytest_add_cli_args =\n    -p\n    no:cacheprovider\n    -q\n")


# mutmut 3.8.1's `mutmut run` up to the generation of the mutants (copy, source paths, mutants/ and the .meta files
# that `mutmut results` reads), without its stats collection and test runs; a later `mutmut run` finds the files
# unmodified and keeps them.
_GENERATE = ("import os, mutmut.__main__ as m\n"
             "m.set_mutant_under_test('mutant_generation')\n"
             "os.makedirs('mutants', exist_ok=True)\n"
             "m.copy_src_dir(); m.copy_also_copy_files(); m.setup_source_paths(); m.store_lines_covered_by_tests()\n"
             "m.create_mutants(1)\n")


class Result(NamedTuple):
    killed: int
    checked: int  # killed + survivors
    survivors: list[str]
    population: int | None = None  # with --sample: how many mutants the sample was drawn from (default: None)


def _statuses(work: Path, env: dict[str, str]) -> dict[str, str]:
    """mutant name -> mutmut's status for every generated mutant (those not run read "not checked")."""
    res = subprocess.run([sys.executable, "-m", "mutmut", "results", "--all", "true"], cwd=work, env=env,
                         check=True, capture_output=True, text=True)
    return {m["name"]: m["status"] for m in (STATUS.match(x) for x in res.stdout.splitlines()) if m}


def run(module: str, *, max_children: int, only: tuple[str, ...] = (), tests: tuple[str, ...] = (),
        sample: int | None = None, seed: int = 0) -> Result:
    """Killed, checked and surviving mutant names for one module; `only`: mutant name patterns to run (default:
    all); `tests`: test files instead of the module's own (default: MODULES[module]); `sample`: run only that many
    mutants drawn with `seed` (from those `only` matches; default: None, all of them)."""
    work = OUT / module.replace("/", "_").removesuffix(".py")
    _copy_tree(work)
    envoy = ROOT / ".venv" / "bin" / "envoy"
    if envoy.is_file():
        (work / ".venv" / "bin").mkdir(parents=True)
        shutil.copy2(envoy, work / ".venv" / "bin" / "envoy")
    (work / "setup.cfg").write_text(_config(module, tests or MODULES[module]))
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "AIFACTORY_MUTATION_STATS": "1"}  # tests/mutation/widen.py
    names, population = only, None
    if sample is not None:
        subprocess.run([sys.executable, "-c", _GENERATE], cwd=work, env=env, check=True, stdout=subprocess.DEVNULL)
        pool = [n for n in _statuses(work, env) if not only or any(fnmatch.fnmatch(n, p) for p in only)]
        names, population = tuple(sample_names(pool, n=sample, seed=seed)), len(pool)
        print(f"{module}: sampled {len(names)} of {population} mutants (seed {seed})", flush=True)
    subprocess.run([sys.executable, "-m", "mutmut", "run", "--max-children", str(max_children), *names], cwd=work,
                   env=env, check=False)
    statuses = _statuses(work, env)
    if sample is not None:
        statuses = {n: statuses[n] for n in names}
    killed = sum(s in ("killed", "timeout", "caught by type check", "segfault") for s in statuses.values())
    survivors = sorted(n for n, s in statuses.items() if s in ("survived", "no tests", "suspicious"))
    return Result(killed, killed + len(survivors), survivors, population)


def summary(module: str, result: Result) -> str:
    """One line: killed/checked and the score; for a sample also how many it was drawn from and the Wilson 95%
    interval of the whole module's score."""
    killed, checked, _, population = result
    score = f"{100 * killed / checked:.1f}%" if checked else "n/a"
    line = f"{module}: {killed}/{checked} mutants killed ({score})"
    if population is not None and checked:
        low, high = wilson_interval(killed=killed, checked=checked)
        line += f", drawn from {population}: module score 95% CI [{100 * low:.1f}%, {100 * high:.1f}%]"
    return line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help=f"default: all of {', '.join(MODULES)}")
    ap.add_argument("--max-children", type=int, default=2, help="parallel test processes (default: 2)")
    ap.add_argument("--only", action="append", default=[], metavar="PATTERN",
                    help="run only mutants whose names match (mutmut's wildcards; repeatable; default: all)")
    ap.add_argument("--tests", action="append", default=[], metavar="FILE",
                    help="test files to run instead of the module's own (repeatable; e.g. without the timing-"
                         "sensitive live tests on a loaded machine)")
    ap.add_argument("--sample", type=int, metavar="N",
                    help="run N mutants drawn at random (of those --only matches) and estimate the module's score "
                         "with its Wilson 95%% interval (default: run all)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's random seed (default: 0)")
    args = ap.parse_args()
    if args.sample is not None and args.sample < 1:
        print(f"--sample: {args.sample} is not a positive number of mutants", file=sys.stderr)
        return 2
    unknown = [m for m in args.modules if m not in MODULES]
    if unknown:
        print(f"unknown module(s): {', '.join(unknown)}; known: {', '.join(MODULES)}", file=sys.stderr)
        return 2
    modules = args.modules or list(MODULES)
    if stale := stale_filters(modules, tuple(args.only)):
        print("\n".join(stale), file=sys.stderr)
        return 2
    report = []
    for module in modules:
        result = run(module, max_children=args.max_children, only=tuple(args.only), tests=tuple(args.tests),
                     sample=args.sample, seed=args.seed)
        report.append(summary(module, result))
        report += [f"  survived: {s}" for s in result.survivors]
    print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
