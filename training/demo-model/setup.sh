#!/usr/bin/env bash
# Installs what training the demo model needs on Debian 12 (never part of CI or ./supernode):
#   bible-kjv, bible-kjv-text: the King James Bible (1611, public domain) and the reader that
#     prints it as text — the English half of the corpus;
#   fortunes-zh: Chinese fortunes, Tang and Song poems (GPL-3+) — the Chinese half;
#   python3-torch, python3-numpy: Debian's CPU PyTorch for the model and its training.
set -euo pipefail
PACKAGES=(bible-kjv bible-kjv-text fortunes-zh python3-torch python3-numpy)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  if [[ $(id -u) != 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
