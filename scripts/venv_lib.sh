# Helpers the setup scripts share (sourced, not run): each virtualenv carries a stamp, the
# hash of what it was installed from, so that a re-run with nothing new to install is instant.

# make_venv WHO PYTHON DIR: create the virtualenv DIR with PYTHON unless it already exists.
make_venv() {
  if [ ! -x "$3/bin/python" ]; then
    echo "$1: creating $3 with $("$2" --version)"
    "$2" -m venv "$3"
  fi
}

# venv_python_version DIR: the X.Y of DIR's Python (which lock applies).
venv_python_version() {
  "$1/bin/python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")'
}

# needs_install DIR WANT: true when DIR was not installed from WANT (a hash); the stale stamp is
# removed first, so an install that fails half-way is redone on the next run.
needs_install() {
  [ "$(cat "$1/.gdpo-nemo-installed" 2>/dev/null)" = "$2" ] && return 1
  rm -f "$1/.gdpo-nemo-installed"
}

# mark_installed DIR WANT: record that DIR now holds what WANT hashes.
mark_installed() {
  echo "$2" > "$1/.gdpo-nemo-installed"
}
