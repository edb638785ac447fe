/* Headers whose declarations bindgen turns into Rust. */
#include <rte_config.h>
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_lcore.h>
#include <rte_launch.h>
#include <rte_cycles.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ethdev.h>
#include <rte_ring.h>
#include <rte_dev.h>
#include <rte_version.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_lpm6.h>
#include "shim.h"
