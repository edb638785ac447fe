#!/usr/bin/env bash
# Installs what intswitch needs to build, run and test on Debian 12:
# DPDK 22.11 (headers, libraries, drivers, dpdk-testpmd), clang for bindgen,
# the tools the tests drive (iproute2, ethtool, ping, tshark, python3 and its
# venv for the TRex profiles' check (pip installs trex-stl-lib), strace,
# redis-server for intcollector's Redis export, chromium and chromium-driver
# (and fonts-liberation, its page fonts) for the dashboard's browser test;
# fontconfig and FreeType for `intcollector plot`'s text; systemd
# (systemd-analyze checks the unit) and pciutils (dpdk-devbind.py's lspci);
# its Kafka export's librdkafka
# is built by cargo from the rdkafka crate's bundled source with
# build-essential), and
# CA certificates for cargo's HTTPS to crates.io (a minimal Debian has none).
# Idempotent: skips apt when everything is already there.
set -euo pipefail

pkgs=(dpdk dpdk-dev libdpdk-dev pkg-config clang libclang-dev build-essential
      iproute2 iputils-ping ethtool tshark python3 python3-venv procps strace ca-certificates redis-server
      chromium chromium-driver fonts-liberation libfontconfig-dev libfreetype-dev
      systemd pciutils)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  # tshark asks whether non-root users may capture; answer no, non-interactively.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

pkg-config --atleast-version=22.11 libdpdk || { echo "setup: libdpdk >= 22.11 not found by pkg-config" >&2; exit 1; }
command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
echo "setup: ok (DPDK $(pkg-config --modversion libdpdk))"
