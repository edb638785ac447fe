/* See shim.h: forwards to DPDK's static-inline functions. */
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_cycles.h>
#include <rte_lcore.h>
#include <rte_errno.h>
#include <rte_pause.h>
#include <rte_fib.h>
#include <rte_fib6.h>
#include <rte_lpm6.h>
#include <stddef.h>
#include "shim.h"

uint16_t shim_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{ return rte_eth_rx_burst(port, queue, pkts, n); }
uint16_t shim_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n)
{ return rte_eth_tx_burst(port, queue, pkts, n); }

struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp) { return rte_pktmbuf_alloc(mp); }
int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned n)
{ return rte_pktmbuf_alloc_bulk(mp, mbufs, n); }
void shim_pktmbuf_free(struct rte_mbuf *m) { rte_pktmbuf_free(m); }
void shim_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned n) { rte_pktmbuf_free_bulk(mbufs, n); }
char *shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_prepend(m, len); }
char *shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_append(m, len); }
char *shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_adj(m, len); }
int shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len) { return rte_pktmbuf_trim(m, len); }
void shim_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v) { rte_mbuf_refcnt_update(m, v); }
uint16_t shim_mbuf_refcnt_read(const struct rte_mbuf *m) { return rte_mbuf_refcnt_read(m); }

uint8_t *shim_mbuf_data(struct rte_mbuf *m) { return rte_pktmbuf_mtod(m, uint8_t *); }
uint16_t shim_mbuf_data_len(const struct rte_mbuf *m) { return m->data_len; }
uint32_t shim_mbuf_pkt_len(const struct rte_mbuf *m) { return m->pkt_len; }
uint16_t shim_mbuf_nb_segs(const struct rte_mbuf *m) { return m->nb_segs; }
uint16_t shim_mbuf_port(const struct rte_mbuf *m) { return m->port; }
uint32_t shim_mbuf_rss_hash(const struct rte_mbuf *m) { return m->hash.rss; }
int shim_mbuf_has_rss_hash(const struct rte_mbuf *m) { return (m->ol_flags & RTE_MBUF_F_RX_RSS_HASH) != 0; }
uint16_t shim_mbuf_headroom(const struct rte_mbuf *m) { return rte_pktmbuf_headroom(m); }
uint16_t shim_mbuf_tailroom(const struct rte_mbuf *m) { return rte_pktmbuf_tailroom(m); }

uint64_t shim_rdtsc(void) { return rte_rdtsc(); }
uint64_t shim_get_tsc_hz(void) { return rte_get_tsc_hz(); }
unsigned shim_lcore_id(void) { return rte_lcore_id(); }
int shim_errno(void) { return rte_errno; }
void shim_pause(void) { rte_pause(); }

unsigned shim_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned n)
{ return rte_ring_enqueue_burst(r, objs, n, NULL); }
unsigned shim_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned n)
{ return rte_ring_dequeue_burst(r, objs, n, NULL); }
unsigned shim_ring_count(const struct rte_ring *r) { return rte_ring_count(r); }

/* RTE_ETH_RSS_* are function-like macros (RTE_BIT64) that bindgen cannot evaluate. */
uint64_t shim_rss_hf_5tuple(void) { return RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP; }
/* RTE_ETH_RX_OFFLOAD_* likewise (RTE_BIT64). */
uint64_t shim_rx_offload_ipv4_cksum(void) { return RTE_ETH_RX_OFFLOAD_IPV4_CKSUM; }

/* Layout facts the Rust side relies on when it reads mbuf fields directly. */
void shim_mbuf_layout(uint32_t out[6])
{
	out[0] = offsetof(struct rte_mbuf, data_off);
	out[1] = offsetof(struct rte_mbuf, nb_segs);
	out[2] = offsetof(struct rte_mbuf, pkt_len);
	out[3] = offsetof(struct rte_mbuf, data_len);
	out[4] = sizeof(struct rte_mbuf);
	out[5] = offsetof(struct rte_mbuf, ol_flags);
}

struct rte_fib *shim_fib_create(const char *name, int socket_id, uint32_t max_routes, uint32_t num_tbl8)
{
	struct rte_fib_conf c = { .type = RTE_FIB_DIR24_8, .default_nh = SHIM_FIB_MISS, .max_routes = (int)max_routes };
	c.dir24_8.nh_sz = RTE_FIB_DIR24_8_4B;
	c.dir24_8.num_tbl8 = num_tbl8;
	return rte_fib_create(name, socket_id, &c);
}

struct rte_fib6 *shim_fib6_create(const char *name, int socket_id, uint32_t max_routes, uint32_t num_tbl8)
{
	struct rte_fib6_conf c = { .type = RTE_FIB6_TRIE, .default_nh = SHIM_FIB_MISS, .max_routes = (int)max_routes };
	c.trie.nh_sz = RTE_FIB6_TRIE_4B;
	c.trie.num_tbl8 = num_tbl8;
	return rte_fib6_create(name, socket_id, &c);
}

struct rte_lpm6 *shim_lpm6_create(const char *name, int socket_id, uint32_t max_rules, uint32_t num_tbl8)
{
	struct rte_lpm6_config c = { .max_rules = max_rules, .number_tbl8s = num_tbl8 };
	return rte_lpm6_create(name, socket_id, &c);
}
