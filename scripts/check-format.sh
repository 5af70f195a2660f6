#!/usr/bin/env bash
# Fails when a tracked C++ source differs from .clang-format (Debian's clang-format 14, which
# scripts/setup.sh installs). Fix with: git ls-files '*.cpp' '*.hpp' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed" >&2; exit 1; }
git ls-files -z '*.cpp' '*.hpp' '*.h' '*.cc' | xargs -0 clang-format --dry-run -Werror
echo "check-format: $(git ls-files '*.cpp' '*.hpp' '*.h' '*.cc' | wc -l) files match .clang-format"
