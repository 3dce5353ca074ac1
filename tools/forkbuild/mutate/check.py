"""`forkbuild mutate --check`: the recorded results are current for every patch of every
recorded variant (the default one recorded), every survivor has a reason. Runs no mutant."""

from __future__ import annotations

from forkbuild.config import Series
from forkbuild.mutate import moves
from forkbuild.mutate.results import NOT_RUN, REASONS_FILE, RESULTS_FILE, SURVIVED, Reasons, patch_key


def problems(series: Series, results: dict, reasons: Reasons) -> list[str]:
    found: list[str] = []
    variants = results["variants"]
    if series.default_variant not in variants:
        found.append(f"{RESULTS_FILE}: no results for the default variant {series.default_variant}: "
                     f"run `nox -s mutate`")
    known_ids: dict[str, set[str]] = {}
    survived_ids: dict[str, set[str]] = {}
    moving: dict[str, dict[str, str]] = {}  # per patch: reasons a run moved but did not write yet
    for variant, recorded in sorted(variants.items()):
        if variant not in series.variants:
            found.append(f"{RESULTS_FILE}: variant {variant} is not in series.toml")
            continue
        patches = recorded.get("patches", {})
        entries = {entry.file: entry for entry in series.patches_for(variant)}
        for file in sorted(set(patches) - set(entries)):
            found.append(f"{RESULTS_FILE}: {variant}: {file} is not a patch of the variant any more: "
                         f"run `nox -s mutate -- --variant {variant}` to drop it")
        for file, entry in entries.items():
            rerun = f"`nox -s mutate -- --variant {variant} --patch {file}`"
            if file not in patches:
                if not reasons.of(file, NOT_RUN):  # a recorded reason why it has none (the report prints it)
                    found.append(f"{variant}: patches/{file} has no mutation results: run {rerun}")
                continue
            record = patches[file]
            pending = moves.pending(record.get(moves.MOVED, {}), reasons.by_patch.get(file, {}))
            moving.setdefault(file, {}).update(pending)
            summaries = {mutant["id"]: mutant["summary"] for mutant in record.get("mutants", [])}
            for old, new in sorted(pending.items()):
                found.append(f"{REASONS_FILE}: [\"{file}\"] {old}: its statement ({summaries.get(new, '?')}) is "
                             f"mutant {new} now: {rerun} moves the reason (no mutant runs while the results are "
                             f"current)")
            if record.get("key") != patch_key(series, entry):
                found.append(f"{variant}: patches/{file}: results are stale (the patch, its feature's tests or "
                             f"the upstream pin changed): run {rerun}")
            for mutant in record.get("mutants", []):
                known_ids.setdefault(file, set()).add(mutant["id"])
                if mutant["status"] != SURVIVED:
                    continue
                survived_ids.setdefault(file, set()).add(mutant["id"])
                if not reasons.of(file, mutant["id"]) and mutant["id"] not in moving[file].values():
                    found.append(f"{variant}: patches/{file}: mutant {mutant['id']} ({mutant['summary']}) survived "
                                 f"and {REASONS_FILE} records no reason: kill it with a test through the real "
                                 f"call site, or add [\"{file}\"] \"{mutant['id']}\" = \"why\"")
    recorded_files = {file for variant in variants.values() for file in variant.get("patches", {})}
    for file, table in sorted(reasons.by_patch.items()):
        if file not in recorded_files:
            continue  # no results yet: reported above; its reasons are judged once it has them
        for mutant_id in sorted(set(table) - set(moving.get(file, {}))):  # a move is named above
            if mutant_id == NOT_RUN:
                found.append(f"{REASONS_FILE}: [\"{file}\"] \"{NOT_RUN}\": the patch has results now; remove it")
            elif mutant_id not in known_ids.get(file, set()):
                found.append(f"{REASONS_FILE}: [\"{file}\"] {mutant_id}: no such mutant in {RESULTS_FILE}")
            elif mutant_id not in survived_ids.get(file, set()):
                found.append(f"{REASONS_FILE}: [\"{file}\"] {mutant_id}: is killed now; remove its reason")
    return found
