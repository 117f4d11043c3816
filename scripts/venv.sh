# Sourced, not run: names the project's Python environment.
# ZRT_VENV is the venv folder, kept outside the clone (keyed by the requirements files and the
# interpreter) so that every clone and CI reuse it; the clone's .venv is a symlink to it.
# Override the folder with ZRT_VENV_HOME, or the whole path with ZRT_VENV.
ZRT_VENV_PYTHON_BASE="${ZRT_VENV_PYTHON_BASE:-/usr/bin/python3}"
if [[ -z "${ZRT_VENV:-}" ]]; then
  _zrt_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  _zrt_key="$(cat "$_zrt_root/scripts/requirements.txt" "$_zrt_root/scripts/requirements-deepspeed.txt" \
                <("$ZRT_VENV_PYTHON_BASE" -c 'import sys; print(sys.version)') | sha256sum | cut -c1-12)"
  ZRT_VENV="${ZRT_VENV_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/zrt}/venv-$_zrt_key"
  unset _zrt_root _zrt_key
fi
ZRT_VENV_PYTHON="$ZRT_VENV/bin/python"
