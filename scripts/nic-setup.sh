#!/usr/bin/env bash
# Prepares a host for intswitch on real NICs: hugepages and port binding.
#
#   nic-setup.sh status                      hugepages, their mount, network devices and drivers
#   nic-setup.sh hugepages N [--size 2M|1G]  reserve N pages (0 releases them), mount hugetlbfs
#   nic-setup.sh bind PCI... [--driver D]    bind ports to D (default vfio-pci) for DPDK
#   nic-setup.sh unbind PCI... [--to D]      give ports back to the kernel driver D (default:
#                                            the one dpdk-devbind.py reports as theirs)
#   nic-setup.sh up CONFIG [--dry-run]       what a switch config needs: with [eal] huge = true,
#                                            2 MiB pages for memory_mb (+ 25 %, default 1024 MiB),
#                                            and every [[port]] device that is a PCI address bound
#                                            to vfio-pci (the systemd unit's ExecStartPre)
#
# Needs root for everything but status and --dry-run. PCI addresses are
# DDDD:BB:DD.F (or BB:DD.F). Exit 2 on bad arguments.
set -euo pipefail

die() { echo "nic-setup: $*" >&2; exit 2; }
devbind() { command -v dpdk-devbind.py >/dev/null || die "dpdk-devbind.py not found (apt install dpdk)"; dpdk-devbind.py "$@"; }
need_root() { [[ $(id -u) -eq 0 ]] || die "$1 needs root"; }

pci_ok() { [[ "$1" =~ ^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$ ]]; }

page_dir() {
  case "$1" in
    2M|2m|2048kB) echo /sys/kernel/mm/hugepages/hugepages-2048kB ;;
    1G|1g|1048576kB) echo /sys/kernel/mm/hugepages/hugepages-1048576kB ;;
    *) die "--size $1: 2M or 1G" ;;
  esac
}

status() {
  echo "hugepages:"
  for d in /sys/kernel/mm/hugepages/hugepages-*; do
    [[ -d "$d" ]] || continue
    echo "  ${d##*-}: $(cat "$d/nr_hugepages") reserved, $(cat "$d/free_hugepages") free"
  done
  if mountpoint -q /dev/hugepages 2>/dev/null; then echo "  /dev/hugepages mounted"; else echo "  /dev/hugepages not mounted"; fi
  echo "network devices:"
  if command -v dpdk-devbind.py >/dev/null; then dpdk-devbind.py --status-dev net | sed 's/^/  /'; else echo "  (dpdk-devbind.py not found)"; fi
}

hugepages() {
  local n="${1:-}" size=2M
  shift || true
  while (($#)); do
    case "$1" in --size) size="${2:-}"; shift 2 ;; *) die "hugepages: unknown argument '$1'" ;; esac
  done
  [[ "$n" =~ ^[0-9]+$ ]] || die "hugepages N: N must be a number of pages"
  local dir; dir=$(page_dir "$size")
  [[ -d "$dir" ]] || die "this kernel has no $size pages ($dir)"
  need_root "hugepages"
  echo "$n" > "$dir/nr_hugepages"
  local got; got=$(cat "$dir/nr_hugepages")
  if ((n > 0)); then
    mkdir -p /dev/hugepages
    mountpoint -q /dev/hugepages || mount -t hugetlbfs nodev /dev/hugepages
  fi
  echo "hugepages: $got of $n $size pages reserved"
  ((got >= n)) || { echo "nic-setup: the kernel gave only $got pages (memory fragmented? try at boot)" >&2; exit 1; }
}

bind() {
  local driver=vfio-pci devs=()
  while (($#)); do
    case "$1" in --driver) driver="${2:-}"; shift 2 ;; *) pci_ok "$1" || die "'$1' is not a PCI address"; devs+=("$1"); shift ;; esac
  done
  ((${#devs[@]})) || die "bind: name at least one PCI address"
  need_root "bind"
  [[ "$driver" == vfio-pci ]] && modprobe vfio-pci
  devbind -b "$driver" "${devs[@]}"
}

unbind() {
  local to="" devs=()
  while (($#)); do
    case "$1" in --to) to="${2:-}"; shift 2 ;; *) pci_ok "$1" || die "'$1' is not a PCI address"; devs+=("$1"); shift ;; esac
  done
  ((${#devs[@]})) || die "unbind: name at least one PCI address"
  need_root "unbind"
  for d in "${devs[@]}"; do
    local drv="$to"
    if [[ -z "$drv" ]]; then
      # dpdk-devbind.py lists a bound port's kernel driver as unused=...
      drv=$(devbind --status-dev net | grep -F "$d" | sed -n 's/.*unused=\([^, ]*\).*/\1/p' | head -n1)
      [[ -n "$drv" ]] || die "unbind $d: no kernel driver known for it; name one with --to"
    fi
    devbind -b "$drv" "$d"
  done
}

up() {
  local cfg="${1:-}" dry=0
  shift || true
  while (($#)); do
    case "$1" in --dry-run) dry=1; shift ;; *) die "up: unknown argument '$1'" ;; esac
  done
  [[ -f "$cfg" ]] || die "up CONFIG: '$cfg' is not a file"
  # huge, memory_mb and the PCI devices, from the TOML (python3's tomllib).
  local plan
  plan=$(python3 - "$cfg" <<'PY'
import re, sys, tomllib
try:
    with open(sys.argv[1], "rb") as f:
        c = tomllib.load(f)
except (OSError, tomllib.TOMLDecodeError) as e:
    print(f"error {e}")
    sys.exit(0)
eal = c.get("eal", {})
print("huge", "1" if eal.get("huge", False) else "0", int(eal.get("memory_mb", 1024)))
pci = re.compile(r"^([0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
for p in c.get("port", []):
    dev = str(p.get("device", "")).split(",")[0]
    if pci.match(dev):
        print("pci", dev, p.get("name", "?"))
PY
)
  if [[ "$plan" == error* ]]; then die "up: $cfg: ${plan#error }"; fi
  local huge mb pcis=()
  read -r _ huge mb <<<"$(grep '^huge ' <<<"$plan")"
  while read -r kind dev name; do
    [[ "$kind" == pci ]] && pcis+=("$dev") && echo "up: port $name is PCI device $dev"
  done <<<"$plan"
  if ((huge)); then
    local pages=$(((mb * 5 / 4 + 1) / 2))
    echo "up: [eal] huge = true, memory_mb $mb: $pages pages of 2 MiB"
    ((dry)) || hugepages "$pages"
  else
    echo "up: [eal] huge = false: no hugepages needed"
  fi
  if ((${#pcis[@]})); then
    echo "up: binding ${pcis[*]} to vfio-pci"
    ((dry)) || bind "${pcis[@]}"
  else
    echo "up: no PCI ports (vdevs only): nothing to bind"
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  status) status ;;
  hugepages) hugepages "$@" ;;
  bind) bind "$@" ;;
  unbind) unbind "$@" ;;
  up) up "$@" ;;
  -h|--help|help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
