#!/usr/bin/env bash
# The course on every Python it supports (3.10 to 3.13), not part of `make test` (each interpreter other than
# the one whose torch wheel is cached downloads torch, the CUDA build from PyPI, several GB).
#
#   scripts/check_pythons.sh [python3.10 python3.12 ...]     (default: every python3.1x on PATH that runs)
#
# For each interpreter: a fresh venv under $CHECK_DIR (default /tmp/check-pythons, never the repository),
# `pip install -r requirements.txt` (timed), `python -m autograder demo` on a course of its own (timed), every
# student's score per check of every edition saved as scores-<version>.json; then a Markdown table comparing each
# with the 3.11 run (run 3.11 first, or keep its scores file from an earlier run). Each venv is deleted after its
# demo (KEEP_VENVS=1 keeps them). Interpreters are run one at a time, at the lowest priority.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
DIR=${CHECK_DIR:-/tmp/check-pythons}
mkdir -p "$DIR"
if [ $# -eq 0 ]; then set -- python3.11 python3.10 python3.12 python3.13; fi

scores() {  # every student's points per check, every edition, from grade-class's reports
    "$1" - "$2" "$3" <<'EOF'
import json, sys
from pathlib import Path
reports, out = Path(sys.argv[1]), Path(sys.argv[2])
scores = {}
for path in sorted(reports.glob("*/*.json")):
    doc = json.loads(path.read_text(encoding="utf-8"))
    if "parts" not in doc:
        continue
    scores[f"{path.parent.name}/{path.stem}"] = [[p["id"], c["name"], c["points"], c["passed"]]
                                                 for p in doc["parts"] for c in p["checks"]]
out.write_text(json.dumps(scores, indent=1, sort_keys=True), encoding="utf-8")
print(len(scores))
EOF
}

for py in "$@"; do
    if ! "$py" -c "import sys" >/dev/null 2>&1; then echo "$py: not found (or does not run), skipped"; continue; fi
    v=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    full=$("$py" -c 'import platform; print(platform.python_version())')
    venv="$DIR/venv-$v"; course="$DIR/course-$v"; log="$DIR/log-$v.txt"
    rm -rf "$venv" "$course"
    echo "== $py ($full): venv $venv, log $log"
    t0=$(date +%s)
    { "$py" -m venv "$venv" && nice -n 19 "$venv/bin/pip" install -q -r requirements.txt; } >"$log" 2>&1
    rc=$?; t1=$(date +%s)
    torch=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo "-")
    if [ $rc -ne 0 ]; then
        echo "$v|$full|$torch|install failed (rc $rc)|-|-" >"$DIR/row-$v"; tail -3 "$log"; continue
    fi
    nice -n 19 "$venv/bin/python" -m autograder demo --course "$course" >>"$log" 2>&1
    drc=$?; t2=$(date +%s)
    n=$(scores "$venv/bin/python" "$course/autograder_reports" "$DIR/scores-$v.json" 2>>"$log" || echo 0)
    echo "$v|$full|$torch|$((t1 - t0)) s|$((t2 - t1)) s (rc $drc)|$n" >"$DIR/row-$v"
    echo "   install $((t1 - t0)) s, demo $((t2 - t1)) s (rc $drc), $n reports"
    [ "${KEEP_VENVS:-}" = 1 ] || rm -rf "$venv"
done

echo
echo "| Python | torch | install | demo | reports | every score equal to 3.11's |"
echo "|---|---|---|---|---|---|"
for row in "$DIR"/row-3.*; do
    [ -e "$row" ] || continue
    IFS='|' read -r v full torch install demo n <"$row"
    same="-"
    if [ -s "$DIR/scores-$v.json" ] && [ -s "$DIR/scores-3.11.json" ]; then
        if cmp -s "$DIR/scores-$v.json" "$DIR/scores-3.11.json"; then same="yes"; else same="NO (diff $DIR/scores-{3.11,$v}.json)"; fi
    fi
    echo "| $full | $torch | $install | $demo | $n | $same |"
done
