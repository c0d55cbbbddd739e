#!/usr/bin/env bash
# Every test SECURITY.md and docs/THREAT-MODEL.md cite exists (issues #20, #44): each `Suite.function` names a
# `struct Suite` in Tests/ or Fleet/Tests/ and a `func function` inside that suite's file, and each bare `function` following it
# in the same cell (", `other`") a func of the same suite. Run by Scripts/test.sh; exits non-zero listing dangling citations.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import re, subprocess, sys, pathlib
documents = ["SECURITY.md", "docs/THREAT-MODEL.md"]
files = {}
for path in [*pathlib.Path("Tests").rglob("*.swift"), *pathlib.Path("Fleet/Tests").rglob("*.swift")]:
    if ".build" in path.parts or not path.is_file():
        continue
    src = path.read_text(errors="replace")
    for m in re.finditer(r"\bstruct (\w+Tests)\b", src):
        files.setdefault(m.group(1), []).append((path, src))
missing, checked = [], 0
cells = [cell for document in documents for cell in re.split(r"\|", pathlib.Path(document).read_text())]
for cell in cells:
    suite = None
    for m in re.finditer(r"`([A-Z]\w*Tests)(?:\.(\w+))?`|`([a-z]\w{12,})`", cell):
        if m.group(1):
            suite = m.group(1)
            if suite not in files:
                missing.append(f"suite {suite}"); continue
            names = [m.group(2)] if m.group(2) else []
        elif suite and suite in files:
            names = [m.group(3)]
        else:
            continue
        for name in names:
            checked += 1
            if not any(re.search(r"\bfunc " + re.escape(name) + r"\b", src) for _, src in files[suite]):
                missing.append(f"{suite}.{name}")
if missing:
    print(" and ".join(documents), "cite tests that do not exist:", *sorted(set(missing)), sep="\n  ")
    sys.exit(1)
print(f"{' and '.join(documents)}: {checked} cited tests exist")
PY
