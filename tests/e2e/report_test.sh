#!/usr/bin/env bash
# zrt-report --json names the LibTorch this build uses (the venv's torch for the main build) and,
# with the venv present, the peers' versions as the venv itself reports them; no field carries a
# NUL (Open MPI counts the terminating NUL in its library string).
set -euo pipefail
REPORT="$1"   # build/bin/zrt-report
PYTHON="$2"   # the project's venv Python
json="$("$REPORT" --json)"
"$REPORT" >/dev/null
ZRT_REPORT_JSON="$json" "$PYTHON" - <<'PY'
import importlib.metadata as m, json, os, sys
r = json.loads(os.environ["ZRT_REPORT_JSON"])
raw = os.environ["ZRT_REPORT_JSON"]
assert "\\u0000" not in raw and "\x00" not in raw, "a NUL in the report"
assert r["mpi"]["library"] == r["mpi"]["library"].strip(), r["mpi"]["library"]
venv = r["venv"]
assert venv["found"], venv
for name in ("torch", "deepspeed", "transformers", "accelerate", "safetensors", "tensorboard", "numpy"):
    assert venv["packages"][name] == m.version(name), (name, venv["packages"][name], m.version(name))
lt = r["libtorch"]
if lt["source"] == "venv wheel":
    assert lt["version"] == m.version("torch").split("+")[0], (lt, m.version("torch"))
    assert lt["path"].endswith("site-packages/torch"), lt
print("report_test: OK (libtorch", lt["version"], "from", lt["source"] + ")")
PY
# One option style for every tool (cxxopts): --help exits 0 naming the option, a bad one exits 1.
"$REPORT" --help | grep -q -- "--json" || { echo "zrt-report --help does not list --json"; exit 1; }
rc=0; "$REPORT" --bogus 2>/dev/null || rc=$?
[[ $rc -eq 1 ]] || { echo "zrt-report --bogus exited $rc, expected 1"; exit 1; }
rc=0; out=$("$REPORT" extra 2>&1) || rc=$?
[[ $rc -eq 1 && "$out" == *"unexpected argument 'extra'"* ]] ||
  { echo "zrt-report extra: exit $rc, $out"; exit 1; }
echo "report_test: --help and bad arguments OK"
