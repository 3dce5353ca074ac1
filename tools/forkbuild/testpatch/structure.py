"""Structure checks of a variant's applied tree (fast, torch-free): every patch applies strictly
and compiles; its added lines read one of its feature's guards through `envs.` (unless
`unguarded`); every guard is read and declared; the generated guards module (read with `ast`)
declares exactly the variant's guards as series.toml says them, and no patch edits it."""

from __future__ import annotations

import re
from pathlib import Path

from forkbuild.applier import ApplyResult, PatchRecord
from forkbuild.io.git import Git
from forkbuild.series.combination import Combination
from forkbuild.series.config import GUARD_PREFIX, Guard, Series
from forkbuild.series.patchfile import parse_diff
from forkbuild.testpatch.records import FAIL, PASS, SKIP, STRUCTURE, Record
from forkbuild.wheel import naming
from forkbuild.worktree.guards_module import GeneratedEntry, module_path, read_module

ENVIRON = "srt/environ.py"  # inside the package: where sglang's envs registry lives
GUARD_READ = re.compile(r"\benvs\.(?P<env>[A-Z][A-Z0-9_]*)\b")


def check_structure(*, series: Series, variant: Combination, result: ApplyResult) -> list[Record]:
    """The structure records of `variant`, applied (failures included) in `result`."""
    tree = Git(result.dest)
    records = [_record(record.entry.feature, "apply", FAIL if record.failed else PASS,
                       f"{record.entry.file}: {record.outcome} {record.detail}".rstrip()) for record in result.records]
    applied = [record for record in result.records if record.commit]
    for record in applied:
        for path in _touched(tree, record.commit):
            if path.endswith(".py"):  # the file as this patch left it: a later patch may change or remove it
                try:
                    compile(tree.show_file(record.commit, path), path, "exec", dont_inherit=True)
                except SyntaxError as error:
                    records.append(_record(record.entry.feature, "compile", FAIL,
                                           f"{path}:{error.lineno}: {error.msg} (after {record.entry.file})"))
                else:
                    records.append(_record(record.entry.feature, "compile", PASS, f"{path} compiles"))
    records += _guard_read_records(series, variant, tree, applied)
    records += _declaration_records(series, variant, result)
    return records


def environ_path(series: Series) -> str:
    return f"{series.upstream.package_root}/{naming.distribution_part(series.upstream.name)}/{ENVIRON}"


def _record(feature: str, step: str, outcome: str, reason: str) -> Record:
    return Record(feature=feature, check=STRUCTURE, step=step, outcome=outcome, reason=reason)


def _touched(tree: Git, commit: str) -> list[str]:
    return [path for status, path in tree.changed_files(f"{commit}^", commit) if status != "D"]


def _added_reads(tree: Git, commit: str) -> set[str]:
    """Guards the commit's added lines read through `envs.`."""
    reads: set[str] = set()
    for patched in parse_diff(tree.diff_tree_patch(commit)):
        for hunk in patched:
            for line in hunk:
                if line.is_added:
                    reads.update(match["env"] for match in GUARD_READ.finditer(line.value) if match["env"].startswith(GUARD_PREFIX))
    return reads


def _guard_read_records(series: Series, variant: Combination, tree: Git, applied: list[PatchRecord]) -> list[Record]:
    declared = {guard.env for guard in variant.guards(series)}
    records: list[Record] = []
    read_by_feature: dict[str, set[str]] = {}
    for record in applied:
        entry, reads = record.entry, _added_reads(tree, record.commit)
        read_by_feature.setdefault(entry.feature, set()).update(reads)
        own = {guard.env for guard in series.features[entry.feature].guards}
        undeclared = sorted(reads - declared)
        if undeclared:
            records.append(_record(entry.feature, "guard_read", FAIL,
                                   f"{entry.file} reads {', '.join(undeclared)}, which {variant.name} does not declare "
                                   "(AttributeError at runtime)"))
        if entry.unguarded:
            records.append(_record(entry.feature, "guard_read", PASS, f"{entry.file}: unguarded: {entry.unguarded}"))
        elif reads & own:
            records.append(_record(entry.feature, "guard_read", PASS, f"{entry.file} reads {', '.join(sorted(reads & own))}"))
        else:
            records.append(_record(entry.feature, "guard_read", FAIL,
                                   f"{entry.file}: added code reads none of {', '.join(sorted(own)) or 'its (no) guards'} "
                                   "through envs; read it, or mark the patch unguarded = \"<reason>\" in series.toml"))
    for name in variant.features:
        for guard in series.features[name].guards:
            if guard.env not in read_by_feature.get(name, set()):
                records.append(_record(name, "guard_read", FAIL, f"no patch of {name} reads envs.{guard.env}"))
    return records


def _declaration_records(series: Series, combination: Combination, result: ApplyResult) -> list[Record]:
    """The generated guards module declares exactly the guards of the combination's features
    (as series.toml says them; a patch that edits it is refused by every apply)."""
    chosen, variant = combination.features, combination.name
    records: list[Record] = []
    if not result.records:  # no patches: upstream as it is, no module
        return records + [_record(name, "guard_decl", PASS if series.features[name].guards else SKIP,
                                  f"not built into {variant}; none of its guards declared") for name in series.features]
    declarations = read_declarations(series, result.dest)
    if isinstance(declarations, str):
        return records + [_record(guard.feature, "guard_decl", FAIL, f"{guard.env} is not declared: {declarations}")
                          for guard in series.guards_for(chosen)]
    owners = {guard.env: guard for guard in series.all_guards()}
    for env, entry in sorted(declarations.items()):
        guard = owners.get(env)
        if guard is None:
            records.append(_record(entry.feature, "guard_decl", FAIL, f"{env} is declared but is no feature's guard in series.toml"))
        elif guard.feature not in chosen:
            records.append(_record(guard.feature, "guard_decl", FAIL, f"{env} is declared, but {variant} leaves {guard.feature} out"))
    for name in sorted(set(series.features) - set(chosen)):
        if not any(owners.get(env) and owners[env].feature == name for env in declarations):
            records.append(_record(name, "guard_decl", PASS if series.features[name].guards else SKIP,
                                   f"not built into {variant}; none of its guards declared"))
    for guard in series.guards_for(chosen):
        found = declarations.get(guard.env)
        problem = f"{guard.env} is not declared in the generated guards module" if found is None else mismatch(guard, found)
        records.append(_record(guard.feature, "guard_decl", FAIL if problem else PASS,
                               problem or f"{guard.env}: {guard.type}, default {guard.default!r} (generated)"))
    return records


def read_declarations(series: Series, tree: Path) -> dict[str, GeneratedEntry] | str:
    """The entries of the tree's generated guards module by variable, or why there are none to read."""
    path = module_path(series)
    if path is None:
        return "series.toml names no [series] guards_module"
    if not (tree / path).is_file():
        return f"{path} is missing: forkbuild generates it into every tree that holds patches"
    try:
        return {entry.env: entry for entry in read_module(tree / path)}
    except (ValueError, SyntaxError) as error:
        return f"{path} is not a generated guards module: {error}"


def mismatch(guard: Guard, entry: GeneratedEntry) -> str:
    """Why the generated `entry` does not say what series.toml's `guard` says; empty when it does."""
    wanted, found = (guard.type, guard.default, guard.feature), (entry.type, entry.default, entry.feature)
    return "" if found == wanted else f"declared as (type, default, feature) {found!r}, series.toml says {wanted!r}"
