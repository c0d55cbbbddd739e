#!/usr/bin/env bash
# Every test SECURITY.md cites exists (issue #20): each `Suite.function` names a `struct Suite` in Tests/
# and a `func function` inside that suite's file, and each bare `function` following it in the same cell
# (", `other`") a func of the same suite. Run by Scripts/test.sh; exits non-zero listing dangling citations.
set -uo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import re, subprocess, sys, pathlib
text = pathlib.Path("SECURITY.md").read_text()
files = {}
for path in pathlib.Path("Tests").rglob("*.swift"):
    if ".build" in path.parts or not path.is_file():
        continue
    src = path.read_text(errors="replace")
    for m in re.finditer(r"\bstruct (\w+Tests)\b", src):
        files.setdefault(m.group(1), []).append((path, src))
missing, checked = [], 0
for cell in re.split(r"\|", text):
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
    print("SECURITY.md cites tests that do not exist:", *sorted(set(missing)), sep="\n  ")
    sys.exit(1)
print(f"SECURITY.md: {checked} cited tests exist")
PY
