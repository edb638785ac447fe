/*
 * C shim for DPDK functions that exist only as static inline (or macros) in
 * the headers and therefore have no symbol to link against. Each wrapper is a
 * one-line forward: no logic lives here.
 */
#ifndef INTSWITCH_SHIM_H
#define INTSWITCH_SHIM_H
#include <stdint.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

uint16_t shim_eth_rx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);
uint16_t shim_eth_tx_burst(uint16_t port, uint16_t queue, struct rte_mbuf **pkts, uint16_t n);

struct rte_mbuf *shim_pktmbuf_alloc(struct rte_mempool *mp);
int shim_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned n);
void shim_pktmbuf_free(struct rte_mbuf *m);
void shim_pktmbuf_free_bulk(struct rte_mbuf **mbufs, unsigned n);
char *shim_pktmbuf_prepend(struct rte_mbuf *m, uint16_t len);
char *shim_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
char *shim_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
int shim_pktmbuf_trim(struct rte_mbuf *m, uint16_t len);
void shim_mbuf_refcnt_update(struct rte_mbuf *m, int16_t v);
uint16_t shim_mbuf_refcnt_read(const struct rte_mbuf *m);

/* Field accessors: rte_mbuf is full of anonymous unions that bindgen names poorly. */
uint8_t *shim_mbuf_data(struct rte_mbuf *m);
uint16_t shim_mbuf_data_len(const struct rte_mbuf *m);
uint32_t shim_mbuf_pkt_len(const struct rte_mbuf *m);
uint16_t shim_mbuf_nb_segs(const struct rte_mbuf *m);
uint16_t shim_mbuf_port(const struct rte_mbuf *m);
uint32_t shim_mbuf_rss_hash(const struct rte_mbuf *m);
int shim_mbuf_has_rss_hash(const struct rte_mbuf *m);
uint16_t shim_mbuf_headroom(const struct rte_mbuf *m);
uint16_t shim_mbuf_tailroom(const struct rte_mbuf *m);

uint64_t shim_rdtsc(void);
uint64_t shim_get_tsc_hz(void);
unsigned shim_lcore_id(void);
int shim_errno(void);
void shim_pause(void);

unsigned shim_ring_enqueue_burst(struct rte_ring *r, void *const *objs, unsigned n);
unsigned shim_ring_dequeue_burst(struct rte_ring *r, void **objs, unsigned n);
unsigned shim_ring_count(const struct rte_ring *r);
uint64_t shim_rss_hf_5tuple(void);
uint64_t shim_rx_offload_ipv4_cksum(void);
void shim_mbuf_layout(uint32_t out[6]);
/* DPDK's LPM tables, to compare lookups with the switch's own LPM (their
 * configs hold a union and enums bindgen renders awkwardly). */
struct rte_fib;
struct rte_fib6;
struct rte_lpm6;
/* What a FIB lookup without a route returns: the largest 4-byte next hop
 * (the top bit marks an extended entry). */
#define SHIM_FIB_MISS 0x7fffffffu
/* DIR-24-8 with 4-byte next hops. */
struct rte_fib *shim_fib_create(const char *name, int socket_id, uint32_t max_routes, uint32_t num_tbl8);
/* Trie with 4-byte next hops. */
struct rte_fib6 *shim_fib6_create(const char *name, int socket_id, uint32_t max_routes, uint32_t num_tbl8);
struct rte_lpm6 *shim_lpm6_create(const char *name, int socket_id, uint32_t max_rules, uint32_t num_tbl8);

#endif
