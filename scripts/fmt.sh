#!/usr/bin/env bash
# rustfmt with the kernel's .rustfmt.toml over every Rust file of the project.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh"
cd "$here"
files=$(git ls-files --cached --others --exclude-standard '*.rs')
rustfmt --edition 2021 --config-path "$KSRC/.rustfmt.toml" "$@" $files
