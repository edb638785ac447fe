//! Safe wrapper over DPDK: EAL, mempools, mbufs, ethdev ports, lcores.
//!
//! This is the only module of the crate that uses `unsafe`; every other module
//! sees owned `Mbuf`s, byte slices and typed errors.
use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use dpdk_ffi as ffi;

/// Largest burst the wrapper moves in one call.
pub const MAX_BURST: usize = 64;

/// A failed DPDK call: which operation and DPDK's own reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkError {
    pub op: String,
    pub code: i32,
    pub reason: String,
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (code {})", self.op, self.reason, self.code)
    }
}

impl std::error::Error for DpdkError {}

fn strerror(code: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::rte_strerror(code.abs())) }.to_string_lossy().into_owned()
}

fn err(op: impl Into<String>, code: i32) -> DpdkError {
    DpdkError { op: op.into(), code, reason: strerror(code) }
}

fn last_err(op: impl Into<String>) -> DpdkError {
    // SAFETY: reads the calling thread's rte_errno.
    err(op, unsafe { ffi::shim_errno() })
}

/// EAL command line, typed. `to_argv` renders it in DPDK's syntax.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EalArgs {
    pub program: String,
    /// `-l` list, e.g. "0-1"; a map with '@' ("0@(0-1),1@(0-1)") goes to
    /// `--lcores` instead, letting lcore threads float over CPUs.
    pub lcores: String,
    /// `-m`: memory in MiB (needed with `--no-huge`).
    pub memory_mb: Option<u32>,
    pub no_huge: bool,
    /// `--huge-unlink` (with hugepages): the hugepage files are unlinked
    /// once mapped, so their pages go back to the system when the process
    /// ends, however it ends (no secondary processes can attach).
    pub huge_unlink: bool,
    pub no_pci: bool,
    pub file_prefix: Option<String>,
    /// `--vdev` strings (net_pcap0,rx_pcap=...).
    pub vdevs: Vec<String>,
    /// `-a` PCI addresses.
    pub allow: Vec<String>,
    pub log_level: Option<String>,
    pub extra: Vec<String>,
}

impl EalArgs {
    pub fn to_argv(&self) -> Vec<String> {
        let mut v = vec![self.program.clone()];
        if self.lcores.contains('@') {
            v.push(format!("--lcores={}", self.lcores));
        } else {
            v.extend(["-l".into(), self.lcores.clone()]);
        }
        if let Some(m) = self.memory_mb {
            v.extend(["-m".into(), m.to_string()]);
        }
        if self.no_huge {
            v.push("--no-huge".into());
        } else if self.huge_unlink {
            v.push("--huge-unlink".into());
        }
        if self.no_pci {
            v.push("--no-pci".into());
        }
        if let Some(p) = &self.file_prefix {
            v.push(format!("--file-prefix={p}"));
        }
        for d in &self.vdevs {
            v.push(format!("--vdev={d}"));
        }
        for a in &self.allow {
            v.extend(["-a".into(), a.clone()]);
        }
        if let Some(l) = &self.log_level {
            v.push(format!("--log-level={l}"));
        }
        v.extend(self.extra.iter().cloned());
        v
    }
}

static EAL_INITIALISED: AtomicBool = AtomicBool::new(false);

struct EalInner;

impl Drop for EalInner {
    fn drop(&mut self) {
        // SAFETY: last handle gone: no port, pool or lcore function uses EAL any more.
        unsafe { ffi::rte_eal_cleanup() };
    }
}

/// The initialised EAL. Clones share it; `rte_eal_cleanup` runs when the last
/// clone (including those held by ports and pools) is dropped.
#[derive(Clone)]
pub struct Eal(#[allow(dead_code)] Arc<EalInner>); // held for its Drop

impl Eal {
    /// Initialises the EAL once per process.
    pub fn init(args: &EalArgs) -> Result<Eal, DpdkError> {
        if EAL_INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(DpdkError {
                op: "rte_eal_init".into(),
                code: -1,
                reason: "EAL is already initialised in this process".into(),
            });
        }
        let argv = args.to_argv();
        let cstrs: Vec<CString> =
            argv.iter().map(|a| CString::new(a.as_str())).collect::<Result<_, _>>().map_err(|_| DpdkError {
                op: "rte_eal_init".into(),
                code: -22,
                reason: "argument contains a NUL byte".into(),
            })?;
        // rte_eal_init may permute argv; hand it a leaked copy it can keep.
        let ptrs: Vec<*mut c_char> = cstrs.into_iter().map(|c| c.into_raw()).collect();
        let ptrs = Box::leak(ptrs.into_boxed_slice());
        // SAFETY: argc/argv describe valid NUL-terminated strings that live for the process.
        let rc = unsafe { ffi::rte_eal_init(ptrs.len() as c_int, ptrs.as_mut_ptr()) };
        if rc < 0 {
            EAL_INITIALISED.store(false, Ordering::SeqCst);
            return Err(last_err(format!("rte_eal_init({})", argv.join(" "))));
        }
        Ok(Eal(Arc::new(EalInner)))
    }

    /// Lcore the calling (main) thread runs on.
    pub fn main_lcore(&self) -> u32 {
        // SAFETY: plain getter, valid after init.
        unsafe { ffi::rte_get_main_lcore() }
    }

    /// Worker lcores enabled by `-l`, main excluded, ascending.
    pub fn worker_lcores(&self) -> Vec<u32> {
        let mut v = Vec::new();
        let mut l = u32::MAX;
        loop {
            // SAFETY: iterates the EAL's lcore table; skip_main=1, wrap=0.
            l = unsafe { ffi::rte_get_next_lcore(l, 1, 0) };
            if l >= ffi::RTE_MAX_LCORE {
                return v;
            }
            v.push(l);
        }
    }

    /// Runs `f` on worker lcore `lcore`. Fails if the lcore is unknown or busy.
    pub fn launch<F>(&self, lcore: u32, f: F) -> Result<(), DpdkError>
    where
        F: FnOnce() -> i32 + Send + 'static,
    {
        type Job = Box<dyn FnOnce() -> i32 + Send>;
        extern "C" fn trampoline(arg: *mut c_void) -> c_int {
            // SAFETY: `arg` is the Box<Job> leaked below, handed over exactly once.
            let job: Box<Job> = unsafe { Box::from_raw(arg as *mut Job) };
            job()
        }
        let job: Box<Job> = Box::new(Box::new(f));
        let raw = Box::into_raw(job) as *mut c_void;
        // SAFETY: trampoline has the lcore_function_t signature; raw is a valid Box pointer.
        let rc = unsafe { ffi::rte_eal_remote_launch(Some(trampoline), raw, lcore) };
        if rc != 0 {
            // SAFETY: launch failed, so the trampoline never ran: reclaim the box.
            drop(unsafe { Box::from_raw(raw as *mut Job) });
            return Err(err(format!("rte_eal_remote_launch(lcore {lcore})"), rc));
        }
        Ok(())
    }

    /// Waits for the function running on `lcore` and returns its value.
    pub fn wait(&self, lcore: u32) -> i32 {
        // SAFETY: blocks until the lcore is back in WAIT state.
        unsafe { ffi::rte_eal_wait_lcore(lcore) }
    }

    pub fn socket_id(&self) -> i32 {
        // SAFETY: plain getter for the calling thread.
        unsafe { ffi::rte_socket_id() as i32 }
    }
}

/// DPDK's own longest-prefix-match tables, only to compare lookups with
/// `crate::lpm` on the same routes (`cargo bench -p control --bench lpm`):
/// `rte_fib` (DIR-24-8, rte_lpm's tbl24/tbl8 layout, with a RIB that makes
/// adds fast), `rte_fib6` (its trie) and `rte_lpm6`. Next hops are below
/// `DpdkLpm::MISS`, which a lookup without a route returns.
pub enum DpdkLpmKind {
    Fib4,
    Fib6,
    Lpm6,
}

pub struct DpdkLpm {
    kind: DpdkLpmKind,
    ptr: NonNull<c_void>,
    _eal: Eal,
}

impl DpdkLpm {
    pub const MISS: u64 = ffi::SHIM_FIB_MISS as u64;

    /// A table for `routes` prefixes with `tbl8` second-level groups.
    pub fn new(eal: &Eal, kind: DpdkLpmKind, name: &str, routes: u32, tbl8: u32) -> Result<DpdkLpm, DpdkError> {
        let cname = CString::new(name).map_err(|_| err("lpm create", -22))?;
        let socket = eal.socket_id();
        // SAFETY: cname is a valid C string; the sizes are plain values.
        let p = unsafe {
            match kind {
                DpdkLpmKind::Fib4 => ffi::shim_fib_create(cname.as_ptr(), socket, routes, tbl8) as *mut c_void,
                DpdkLpmKind::Fib6 => ffi::shim_fib6_create(cname.as_ptr(), socket, routes, tbl8) as *mut c_void,
                DpdkLpmKind::Lpm6 => ffi::shim_lpm6_create(cname.as_ptr(), socket, routes, tbl8) as *mut c_void,
            }
        };
        NonNull::new(p)
            .map(|ptr| DpdkLpm { kind, ptr, _eal: eal.clone() })
            .ok_or_else(|| last_err(format!("lpm create {name} ({routes} routes, {tbl8} tbl8 groups)")))
    }

    /// Adds a prefix (IPv4: the address in the first 4 bytes).
    pub fn add(&mut self, addr: &[u8; 16], len: u8, next_hop: u32) -> Result<(), DpdkError> {
        // SAFETY: ptr is the live table of `kind`; addr holds 16 bytes.
        let rc = unsafe {
            match self.kind {
                DpdkLpmKind::Fib4 => ffi::rte_fib_add(
                    self.ptr.as_ptr().cast(),
                    u32::from_be_bytes([addr[0], addr[1], addr[2], addr[3]]),
                    len,
                    next_hop as u64,
                ),
                DpdkLpmKind::Fib6 => ffi::rte_fib6_add(self.ptr.as_ptr().cast(), addr.as_ptr(), len, next_hop as u64),
                DpdkLpmKind::Lpm6 => ffi::rte_lpm6_add(self.ptr.as_ptr().cast(), addr.as_ptr(), len, next_hop),
            }
        };
        if rc < 0 {
            return Err(err("lpm add", rc));
        }
        Ok(())
    }

    /// IPv4 bulk lookup (Fib4): `out[i]` gets `ips[i]`'s next hop.
    pub fn lookup4(&mut self, ips: &mut [u32], out: &mut [u64]) {
        assert!(matches!(self.kind, DpdkLpmKind::Fib4) && out.len() >= ips.len());
        // SAFETY: a live rte_fib; ips and out hold ips.len() elements each.
        unsafe {
            ffi::rte_fib_lookup_bulk(self.ptr.as_ptr().cast(), ips.as_mut_ptr(), out.as_mut_ptr(), ips.len() as c_int)
        };
    }

    /// IPv6 bulk lookup (Fib6, Lpm6): `out[i]` gets `ips[i]`'s next hop.
    pub fn lookup6(&mut self, ips: &mut [[u8; 16]], out: &mut [u64], scratch: &mut [i32]) {
        assert!(out.len() >= ips.len() && scratch.len() >= ips.len());
        match self.kind {
            // SAFETY: a live rte_fib6; ips and out hold ips.len() elements each.
            DpdkLpmKind::Fib6 => unsafe {
                ffi::rte_fib6_lookup_bulk(
                    self.ptr.as_ptr().cast(),
                    ips.as_mut_ptr(),
                    out.as_mut_ptr(),
                    ips.len() as c_int,
                );
            },
            DpdkLpmKind::Lpm6 => {
                // SAFETY: a live rte_lpm6; ips and scratch hold ips.len() elements each.
                unsafe {
                    ffi::rte_lpm6_lookup_bulk_func(
                        self.ptr.as_ptr().cast(),
                        ips.as_mut_ptr(),
                        scratch.as_mut_ptr(),
                        ips.len() as u32,
                    )
                };
                for (o, s) in out.iter_mut().zip(scratch.iter()) {
                    *o = if *s < 0 { Self::MISS } else { *s as u64 };
                }
            }
            DpdkLpmKind::Fib4 => panic!("lookup6 on an IPv4 table"),
        }
    }
}

impl Drop for DpdkLpm {
    fn drop(&mut self) {
        // SAFETY: the table is live and dropped once; EAL outlives it (_eal).
        unsafe {
            match self.kind {
                DpdkLpmKind::Fib4 => ffi::rte_fib_free(self.ptr.as_ptr().cast()),
                DpdkLpmKind::Fib6 => ffi::rte_fib6_free(self.ptr.as_ptr().cast()),
                DpdkLpmKind::Lpm6 => ffi::rte_lpm6_free(self.ptr.as_ptr().cast()),
            }
        }
    }
}

/// Hints the CPU to pull `r`'s cache line in (DPDK's rte_prefetch0), so a
/// burst's table lookups overlap their memory latency.
#[inline(always)]
pub fn prefetch<T>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch has no architectural effect; `r` is a valid reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(r as *const T as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = r;
}

/// Prefetches every cache line `r` covers (a table slot may straddle two).
#[inline(always)]
pub fn prefetch_all<T>(r: &T) {
    let start = r as *const T as usize;
    let end = start + std::mem::size_of::<T>().max(1) - 1;
    let mut line = start & !63;
    while line <= end {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults and has no architectural effect, even for an
        // address outside any mapping; every line here lies within `r` anyway.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(line as *const i8)
        };
        line += 64;
    }
}

/// Asks the kernel to back `mem` with transparent huge pages (fewer TLB
/// misses on large, randomly probed tables). Call before the memory is
/// first touched; harmless where THP is off.
pub fn advise_hugepages<T>(mem: &mut [T]) {
    let start = mem.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(mem);
    let page = 4096;
    let (a, b) = ((start + page - 1) & !(page - 1), end & !(page - 1));
    if b > a {
        // SAFETY: [a, b) lies inside `mem`, which we borrow mutably; MADV_HUGEPAGE
        // changes only how the range is backed, never its contents.
        unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_HUGEPAGE) };
    }
}

/// Lets this thread's short sleeps end on time: the kernel's default timer
/// slack (50 us) would otherwise stretch the idle mode's back-off sleeps,
/// and with them the receive latency (and what AM-PM measures as delay).
pub fn tight_timer_slack() {
    // SAFETY: PR_SET_TIMERSLACK takes a plain integer and affects only the
    // calling thread's timer rounding.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

/// DPDK's version string.
pub fn dpdk_version() -> String {
    // SAFETY: rte_version returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(ffi::rte_version()) }.to_string_lossy().into_owned()
}

/// Current time-stamp counter.
#[inline(always)]
pub fn tsc() -> u64 {
    // rte_rdtsc() is the RDTSC instruction on x86_64: use it inline rather
    // than through a call into the C shim (it is read per packet by INT).
    #[cfg(target_arch = "x86_64")]
    // SAFETY: RDTSC has no memory effects and exists on every x86_64 CPU.
    unsafe {
        std::arch::x86_64::_rdtsc()
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: reads the CPU's time counter; no memory effects.
    unsafe {
        ffi::shim_rdtsc()
    }
}

/// TSC ticks per second against the system clock, measured once (over
/// 50 ms, on first use). The EAL's own figure is rounded to 10 MHz where the
/// CPU does not report its TSC frequency, as in most VMs: 2600 MHz for a
/// 2596.1 MHz TSC, 0.15 % off, which made an emulated 20 ms link delay
/// 30 us long and INT timestamps drift from the wall clock.
pub fn tsc_hz() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| match measure_tsc_hz(std::time::Duration::from_millis(50)) {
        0 => eal_tsc_hz(),
        hz => hz,
    })
}

/// The EAL's TSC frequency (valid after EAL init).
fn eal_tsc_hz() -> u64 {
    // SAFETY: plain getter, valid after EAL init.
    unsafe { ffi::shim_get_tsc_hz() }
}

/// TSC ticks per second of CLOCK_MONOTONIC over about `span` (0 if the
/// clock did not move).
fn measure_tsc_hz(span: std::time::Duration) -> u64 {
    let (tsc0, t0) = tsc_with_instant();
    std::thread::sleep(span);
    let (tsc1, t1) = tsc_with_instant();
    let ns = t1.duration_since(t0).as_nanos();
    if ns == 0 {
        return 0;
    }
    (tsc1.wrapping_sub(tsc0) as u128 * 1_000_000_000 / ns) as u64
}

/// A TSC reading and the monotonic clock at the same moment: of a few tries,
/// the one whose clock read the fewest ticks bracket (the midpoint of the
/// bracket), so a preemption between the reads does not skew it.
fn tsc_with_instant() -> (u64, std::time::Instant) {
    let mut best = (u64::MAX, 0, std::time::Instant::now());
    for _ in 0..8 {
        let a = tsc();
        let t = std::time::Instant::now();
        let b = tsc();
        if b.wrapping_sub(a) < best.0 {
            best = (b.wrapping_sub(a), a + b.wrapping_sub(a) / 2, t);
        }
    }
    (best.1, best.2)
}

/// Id of the calling lcore (u32::MAX for non-EAL threads).
pub fn lcore_id() -> u32 {
    // SAFETY: reads a per-thread variable.
    unsafe { ffi::shim_lcore_id() }
}

/// A packet-buffer pool (`rte_pktmbuf_pool_create`). Cheap to clone; pools
/// live until EAL cleanup.
#[derive(Clone)]
pub struct Mempool {
    ptr: NonNull<ffi::rte_mempool>,
    size: u32,
    _eal: Eal,
}

// SAFETY: DPDK mempools are multi-producer/multi-consumer safe.
unsafe impl Send for Mempool {}
// SAFETY: as above; all operations through &self are thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// A pool of `size` mbufs with `data_room` bytes each, kept by the
    /// mempool driver `ops` ("ring_mp_mc": DPDK's default FIFO ring;
    /// "stack": LIFO, so a freed buffer is reused while still in cache).
    pub fn new(eal: &Eal, name: &str, size: u32, cache: u32, data_room: u16, ops: &str) -> Result<Mempool, DpdkError> {
        let cname = CString::new(name).map_err(|_| err("rte_pktmbuf_pool_create_by_ops", -22))?;
        let cops = CString::new(ops).map_err(|_| err("rte_pktmbuf_pool_create_by_ops", -22))?;
        // SAFETY: cname and cops are valid C strings; other arguments are plain values.
        let p = unsafe {
            ffi::rte_pktmbuf_pool_create_by_ops(
                cname.as_ptr(),
                size,
                cache,
                0,
                data_room,
                eal.socket_id(),
                cops.as_ptr(),
            )
        };
        NonNull::new(p)
            .map(|ptr| Mempool { ptr, size, _eal: eal.clone() })
            .ok_or_else(|| last_err(format!("rte_pktmbuf_pool_create_by_ops({name}, {size} mbufs, {ops})")))
    }

    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: self.ptr is a live pktmbuf pool.
        NonNull::new(unsafe { ffi::shim_pktmbuf_alloc(self.ptr.as_ptr()) }).map(Mbuf)
    }

    /// Mbufs free in the pool (the per-lcore caches count as free).
    pub fn available(&self) -> u32 {
        // SAFETY: read-only query on a live pool.
        unsafe { ffi::rte_mempool_avail_count(self.ptr.as_ptr()) }
    }

    pub fn capacity(&self) -> u32 {
        self.size
    }

    pub fn in_use(&self) -> u32 {
        // SAFETY: read-only query on a live pool.
        unsafe { ffi::rte_mempool_in_use_count(self.ptr.as_ptr()) }
    }
}

/// Mbufs taken from a pool in bulk and handed out one at a time, for a
/// core that builds many packets in a row (the control core's exports): one
/// mempool access per `STASH_BULK` packets, and the header writes of a bulk
/// get (mbufs last freed on another core) overlap their cache misses
/// instead of taking them one allocation at a time.
pub struct MbufStash {
    // Declared before `pool`: held mbufs are freed while the pool (and EAL)
    // handle is still alive.
    mbufs: Vec<Mbuf>,
    pool: Mempool,
}

/// Mbufs one stash refill takes.
pub const STASH_BULK: usize = 16;

impl MbufStash {
    pub fn new(pool: &Mempool) -> MbufStash {
        MbufStash { mbufs: Vec::with_capacity(STASH_BULK), pool: pool.clone() }
    }

    /// A fresh mbuf; None when the pool is empty.
    pub fn take(&mut self) -> Option<Mbuf> {
        if self.mbufs.is_empty() {
            let mut raw = [std::ptr::null_mut::<ffi::rte_mbuf>(); STASH_BULK];
            // SAFETY: `raw` has room for STASH_BULK pointers; the pool is live.
            // The call fills all of them or none (returns non-zero).
            if unsafe { ffi::shim_pktmbuf_alloc_bulk(self.pool.ptr.as_ptr(), raw.as_mut_ptr(), STASH_BULK as u32) } == 0
            {
                // Reversed: `pop` then hands them out in the order DPDK gave them.
                self.mbufs.extend(raw.iter().rev().filter_map(|&p| NonNull::new(p)).map(Mbuf));
            }
        }
        // A pool with fewer than a bulk left still serves single mbufs.
        self.mbufs.pop().or_else(|| self.pool.alloc())
    }
}

/// One owned packet buffer; freed back to its pool on drop.
///
/// A handle is never aliased: flooding shares the buffer only inside
/// `TxBuffer::push_flood`, after which no handle exists any more.
///
/// `repr(transparent)` over a non-null pointer: an `Option<Mbuf>` has the
/// layout of a `*mut rte_mbuf` (None is null), so bursts move between DPDK's
/// pointer arrays and `[Option<Mbuf>]` without a per-packet conversion.
#[repr(transparent)]
pub struct Mbuf(NonNull<ffi::rte_mbuf>);

const _: () = assert!(std::mem::size_of::<Option<Mbuf>>() == std::mem::size_of::<*mut ffi::rte_mbuf>());

// SAFETY: an mbuf may be handed between lcores; ownership is unique.
unsafe impl Send for Mbuf {}

impl Mbuf {
    #[inline(always)]
    fn raw(&self) -> *mut ffi::rte_mbuf {
        self.0.as_ptr()
    }

    /// Bytes of the first segment.
    #[inline(always)]
    pub fn data(&self) -> &[u8] {
        // SAFETY: buf_addr + data_off and data_len describe the initialised part of the
        // first segment, owned by this handle for its lifetime. Fields are read
        // directly (layout checked against C by dpdk-ffi's tests) to avoid a call
        // per access on the hot path.
        unsafe {
            let m = &*self.raw();
            std::slice::from_raw_parts((m.buf_addr as *const u8).add(m.data_off as usize), m.data_len as usize)
        }
    }

    #[inline(always)]
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `data`; &mut self guarantees exclusive access to the buffer.
        unsafe {
            let m = &*self.raw();
            std::slice::from_raw_parts_mut((m.buf_addr as *mut u8).add(m.data_off as usize), m.data_len as usize)
        }
    }

    #[inline(always)]
    pub fn data_len(&self) -> usize {
        // SAFETY: field read on an owned mbuf.
        unsafe { (*self.raw()).data_len as usize }
    }

    #[inline(always)]
    pub fn pkt_len(&self) -> usize {
        // SAFETY: field read on an owned mbuf.
        unsafe { (*self.raw()).pkt_len as usize }
    }

    #[inline(always)]
    pub fn segments(&self) -> u16 {
        // SAFETY: field read on an owned mbuf.
        unsafe { (*self.raw()).nb_segs }
    }

    /// The device's verdict on the IPv4 header checksum, where its port
    /// verifies them (`Port::rx_checksum_active`): Some(true) good (or
    /// "none": the header is intact, its checksum field not filled),
    /// Some(false) bad, None not checked.
    #[inline(always)]
    pub fn ipv4_checksum_by_nic(&self) -> Option<bool> {
        // SAFETY: field read on an owned mbuf (offset checked against C by
        // dpdk-ffi's tests).
        let f = unsafe { (*self.raw()).ol_flags } & ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK as u64;
        match f as u32 {
            ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD => Some(false),
            ffi::RTE_MBUF_F_RX_IP_CKSUM_UNKNOWN => None,
            _ => Some(true),
        }
    }

    /// Port the packet was received on.
    #[inline(always)]
    pub fn port(&self) -> u16 {
        // SAFETY: field read on an owned mbuf.
        unsafe { ffi::shim_mbuf_port(self.raw()) }
    }

    /// RSS hash computed by the NIC, when it gave one.
    #[inline(always)]
    pub fn rss_hash(&self) -> Option<u32> {
        // SAFETY: field reads on an owned mbuf.
        unsafe {
            if ffi::shim_mbuf_has_rss_hash(self.raw()) != 0 {
                Some(ffi::shim_mbuf_rss_hash(self.raw()))
            } else {
                None
            }
        }
    }

    pub fn headroom(&self) -> usize {
        // SAFETY: field read on an owned mbuf.
        unsafe { ffi::shim_mbuf_headroom(self.raw()) as usize }
    }

    pub fn tailroom(&self) -> usize {
        // SAFETY: field read on an owned mbuf.
        unsafe { ffi::shim_mbuf_tailroom(self.raw()) as usize }
    }

    /// Grows the packet at the front by `len` bytes; None if the headroom is short.
    /// (rte_pktmbuf_prepend, done here on the fields: the INT stages call it
    /// per packet, and a call into the C shim spills their registers.)
    #[inline(always)]
    pub fn prepend(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: `&mut self` owns the mbuf; the headroom is the `data_off`
        // bytes in front of the data, so moving the start back by at most
        // that stays inside the buffer, and the new `len` bytes belong to it.
        unsafe {
            let m = &mut *self.raw();
            if len > m.data_off {
                return None;
            }
            m.data_off -= len;
            m.data_len += len;
            m.pkt_len += len as u32;
            Some(std::slice::from_raw_parts_mut((m.buf_addr as *mut u8).add(m.data_off as usize), len as usize))
        }
    }

    /// Removes `len` bytes from the front; false if the first segment is
    /// shorter (rte_pktmbuf_adj, on the fields as `prepend`).
    #[inline(always)]
    pub fn adj(&mut self, len: u16) -> bool {
        // SAFETY: `&mut self` owns the mbuf; at most `data_len` bytes are
        // taken off the front, so the data stays inside the first segment.
        unsafe {
            let m = &mut *self.raw();
            if len > m.data_len {
                return false;
            }
            m.data_off += len;
            m.data_len -= len;
            m.pkt_len -= len as u32;
            true
        }
    }

    /// Grows the packet at the end by `len` bytes; None if the tailroom is short.
    pub fn append(&mut self, len: u16) -> Option<&mut [u8]> {
        // SAFETY: DPDK returns NULL when tailroom is insufficient; otherwise the new
        // `len` bytes at the returned pointer belong to this mbuf.
        unsafe {
            let p = ffi::shim_pktmbuf_append(self.raw(), len);
            (!p.is_null()).then(|| std::slice::from_raw_parts_mut(p as *mut u8, len as usize))
        }
    }

    /// Removes `len` bytes from the end; false if the packet is shorter.
    pub fn trim(&mut self, len: u16) -> bool {
        // SAFETY: DPDK checks the length against the last segment.
        unsafe { ffi::shim_pktmbuf_trim(self.raw(), len) == 0 }
    }

    /// Sets the packet length, trimming or appending as needed. Appended
    /// bytes (a reply padded to Ethernet's 60) are zeros, never what an
    /// earlier packet left in the buffer.
    pub fn set_len(&mut self, len: usize) -> bool {
        let cur = self.data_len();
        if len <= cur {
            self.trim((cur - len) as u16)
        } else {
            self.append((len - cur) as u16).map(|tail| tail.fill(0)).is_some()
        }
    }

    /// A deep copy (all segments) into a new mbuf from `pool`.
    pub fn copy_into(&self, pool: &Mempool) -> Option<Mbuf> {
        // SAFETY: both pointers are live; rte_pktmbuf_copy only reads the source.
        NonNull::new(unsafe { ffi::rte_pktmbuf_copy(self.raw(), pool.ptr.as_ptr(), 0, u32::MAX) }).map(Mbuf)
    }

    #[inline(always)]
    fn into_raw(self) -> *mut ffi::rte_mbuf {
        let p = self.raw();
        std::mem::forget(self);
        p
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: this handle owns the mbuf (one reference of its refcount).
        unsafe { ffi::shim_pktmbuf_free(self.raw()) }
    }
}

/// Link state of a port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStatus {
    pub up: bool,
    pub speed_mbps: u32,
    pub full_duplex: bool,
}

/// Basic ethdev counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    pub ipackets: u64,
    pub opackets: u64,
    pub ibytes: u64,
    pub obytes: u64,
    pub imissed: u64,
    pub ierrors: u64,
    pub oerrors: u64,
    pub rx_nombuf: u64,
}

/// How to bring a port up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortSetup {
    pub rx_queues: u16,
    pub tx_queues: u16,
    pub rx_desc: u16,
    pub tx_desc: u16,
    pub mtu: Option<u16>,
    pub promiscuous: bool,
    /// Spread flows over RX queues by the 5-tuple where the device can.
    pub rss: bool,
    /// MAC address to set instead of the device's own.
    pub mac: Option<[u8; 6]>,
    /// Let the device verify IPv4 header checksums where it can.
    pub rx_checksum: bool,
}

/// What the device reported about itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortInfo {
    pub driver: String,
    pub max_rx_queues: u16,
    pub max_tx_queues: u16,
    pub rss_offloads: u64,
    /// RTE_ETH_RX_OFFLOAD_* the device offers.
    pub rx_offloads: u64,
    pub min_mtu: u16,
    pub max_mtu: u16,
}

/// A started ethdev port. Stopped and closed on drop.
pub struct Port {
    id: u16,
    name: String,
    mac: [u8; 6],
    info: PortInfo,
    rss_active: bool,
    rx_checksum_active: bool,
    _eal: Eal,
}

impl Port {
    /// Finds the ethdev DPDK created for `device` (the vdev name before the first
    /// comma, or a PCI address) and configures and starts it.
    pub fn open(eal: &Eal, device: &str, setup: &PortSetup, pool: &Mempool) -> Result<Port, DpdkError> {
        let name = device.split(',').next().unwrap_or(device);
        let cname = CString::new(name).map_err(|_| err("port name", -22))?;
        let mut id: u16 = 0;
        // SAFETY: cname is a valid C string and id a valid out-pointer.
        let rc = unsafe { ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if rc != 0 {
            return Err(DpdkError {
                op: format!("find port {name}"),
                code: rc,
                reason: "no such ethdev (is the vdev or PCI device given to the EAL?)".into(),
            });
        }
        let info = Self::query_info(id)?;
        if setup.rx_queues > info.max_rx_queues || setup.tx_queues > info.max_tx_queues {
            return Err(DpdkError {
                op: format!("configure port {name}"),
                code: -22,
                reason: format!(
                    "needs {} rx / {} tx queues, device {} supports {} / {}",
                    setup.rx_queues, setup.tx_queues, info.driver, info.max_rx_queues, info.max_tx_queues
                ),
            });
        }
        let mut conf = ffi::rte_eth_conf::default();
        let want_hf = rss_hf_5tuple() & info.rss_offloads;
        let rss_active = setup.rss && setup.rx_queues > 1 && want_hf != 0;
        if rss_active {
            conf.rxmode.mq_mode = ffi::rte_eth_rx_mq_mode_RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = want_hf;
        }
        let ipv4_cksum = rx_offload_ipv4_cksum();
        let rx_checksum_active = setup.rx_checksum && info.rx_offloads & ipv4_cksum != 0;
        if rx_checksum_active {
            conf.rxmode.offloads |= ipv4_cksum;
        }
        // SAFETY: id is a valid port; conf is a fully initialised struct.
        let rc = unsafe { ffi::rte_eth_dev_configure(id, setup.rx_queues, setup.tx_queues, &conf) };
        if rc != 0 {
            return Err(err(format!("rte_eth_dev_configure({name})"), rc));
        }
        let (mut rxd, mut txd) = (setup.rx_desc, setup.tx_desc);
        // SAFETY: valid port id and out-pointers.
        let rc = unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(id, &mut rxd, &mut txd) };
        if rc != 0 {
            return Err(err(format!("rte_eth_dev_adjust_nb_rx_tx_desc({name})"), rc));
        }
        // SAFETY: plain query.
        let socket = unsafe { ffi::rte_eth_dev_socket_id(id) };
        let socket = if socket < 0 { ffi::SOCKET_ID_ANY } else { socket };
        for q in 0..setup.rx_queues {
            // SAFETY: configured port, queue index in range, live pool; NULL conf = defaults.
            let rc =
                unsafe { ffi::rte_eth_rx_queue_setup(id, q, rxd, socket as u32, std::ptr::null(), pool.ptr.as_ptr()) };
            if rc != 0 {
                return Err(err(format!("rte_eth_rx_queue_setup({name}, {q})"), rc));
            }
        }
        for q in 0..setup.tx_queues {
            // SAFETY: configured port, queue index in range; NULL conf = defaults.
            let rc = unsafe { ffi::rte_eth_tx_queue_setup(id, q, txd, socket as u32, std::ptr::null()) };
            if rc != 0 {
                return Err(err(format!("rte_eth_tx_queue_setup({name}, {q})"), rc));
            }
        }
        if let Some(mtu) = setup.mtu {
            // SAFETY: valid port id.
            let rc = unsafe { ffi::rte_eth_dev_set_mtu(id, mtu) };
            // Some vdevs cannot change MTU (-ENOTSUP); that is not fatal for them.
            if rc != 0 && rc != -(libc_enotsup()) {
                return Err(err(format!("rte_eth_dev_set_mtu({name}, {mtu})"), rc));
            }
        }
        // SAFETY: valid, configured port.
        let rc = unsafe { ffi::rte_eth_dev_start(id) };
        if rc != 0 {
            return Err(err(format!("rte_eth_dev_start({name})"), rc));
        }
        if setup.promiscuous {
            // SAFETY: valid, started port.
            let rc = unsafe { ffi::rte_eth_promiscuous_enable(id) };
            // Vdevs that receive every frame anyway (net_null, net_ring)
            // answer -ENOTSUP; any other failure is the port's.
            if rc != 0 && rc != -libc_enotsup() {
                return Err(err(format!("rte_eth_promiscuous_enable({name})"), rc));
            }
        }
        let mut mac = [0u8; 6];
        // SAFETY: rte_ether_addr is 6 bytes; mac is a 6-byte writable buffer.
        unsafe { ffi::rte_eth_macaddr_get(id, mac.as_mut_ptr() as *mut ffi::rte_ether_addr) };
        if let Some(mut m) = setup.mac {
            // SAFETY: rte_ether_addr is 6 bytes; m is a 6-byte buffer.
            let rc = unsafe { ffi::rte_eth_dev_default_mac_addr_set(id, m.as_mut_ptr() as *mut ffi::rte_ether_addr) };
            // A device that cannot change its MAC (net_pcap) still receives
            // every frame in promiscuous mode; the switch then uses the
            // configured MAC in software.
            if rc != 0 && !(rc == -libc_enotsup() && setup.promiscuous) {
                return Err(err(format!("set MAC address of {name}"), rc));
            }
            mac = m;
        }
        Ok(Port { id, name: name.to_string(), mac, info, rss_active, rx_checksum_active, _eal: eal.clone() })
    }

    fn query_info(id: u16) -> Result<PortInfo, DpdkError> {
        let mut di = ffi::rte_eth_dev_info::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ffi::rte_eth_dev_info_get(id, &mut di) };
        if rc != 0 {
            return Err(err("rte_eth_dev_info_get", rc));
        }
        let driver = if di.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name is a static NUL-terminated string owned by the driver.
            unsafe { CStr::from_ptr(di.driver_name) }.to_string_lossy().into_owned()
        };
        Ok(PortInfo {
            driver,
            max_rx_queues: di.max_rx_queues,
            max_tx_queues: di.max_tx_queues,
            rss_offloads: di.flow_type_rss_offloads,
            rx_offloads: di.rx_offload_capa,
            min_mtu: di.min_mtu,
            max_mtu: di.max_mtu,
        })
    }

    pub fn id(&self) -> u16 {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    pub fn info(&self) -> &PortInfo {
        &self.info
    }

    pub fn rss_active(&self) -> bool {
        self.rss_active
    }

    /// Whether the device verifies received IPv4 header checksums (and
    /// marks each mbuf with its verdict, `Mbuf::ipv4_checksum_by_nic`).
    pub fn rx_checksum_active(&self) -> bool {
        self.rx_checksum_active
    }

    pub fn link(&self) -> LinkStatus {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid port id and out-pointer.
        let rc = unsafe { ffi::rte_eth_link_get_nowait(self.id, &mut l) };
        if rc != 0 {
            return LinkStatus::default();
        }
        LinkStatus { up: l.link_status() != 0, speed_mbps: l.link_speed, full_duplex: l.link_duplex() != 0 }
    }

    /// Administratively brings the link up or down (where the device supports it).
    pub fn set_link(&self, up: bool) -> Result<(), DpdkError> {
        // SAFETY: valid port id.
        let rc = unsafe {
            if up {
                ffi::rte_eth_dev_set_link_up(self.id)
            } else {
                ffi::rte_eth_dev_set_link_down(self.id)
            }
        };
        if rc != 0 {
            return Err(err(format!("set link {} on {}", if up { "up" } else { "down" }, self.name), rc));
        }
        Ok(())
    }

    pub fn stats(&self) -> PortStats {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port id and out-pointer.
        unsafe { ffi::rte_eth_stats_get(self.id, &mut s) };
        PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        }
    }

    /// Driver-specific extended counters, by name.
    pub fn xstats(&self) -> Vec<(String, u64)> {
        // SAFETY: NULL/0 asks for the count only.
        let n = unsafe { ffi::rte_eth_xstats_get_names(self.id, std::ptr::null_mut(), 0) };
        if n <= 0 {
            return Vec::new();
        }
        let mut names = vec![ffi::rte_eth_xstat_name::default(); n as usize];
        let mut vals = vec![ffi::rte_eth_xstat::default(); n as usize];
        // SAFETY: both buffers hold n entries.
        let got_n = unsafe { ffi::rte_eth_xstats_get_names(self.id, names.as_mut_ptr(), n as u32) };
        // SAFETY: as above.
        let got_v = unsafe { ffi::rte_eth_xstats_get(self.id, vals.as_mut_ptr(), n as u32) };
        let k = got_n.min(got_v).max(0) as usize;
        (0..k)
            .map(|i| {
                // SAFETY: DPDK NUL-terminates names within their 64-byte array.
                let name = unsafe { CStr::from_ptr(names[i].name.as_ptr()) }.to_string_lossy().into_owned();
                (name, vals[i].value)
            })
            .collect()
    }

    /// An RX queue handle for one worker.
    pub fn rx_queue(&self, queue: u16) -> RxQueue {
        RxQueue { port: self.id, queue }
    }

    /// A buffered TX queue handle for one worker.
    pub fn tx_buffer(&self, queue: u16) -> TxBuffer {
        TxBuffer { port: self.id, queue, len: 0, pkts: [std::ptr::null_mut(); MAX_BURST] }
    }
}

impl Drop for Port {
    fn drop(&mut self) {
        // SAFETY: workers using this port's queues have been joined before the Port drops.
        unsafe {
            ffi::rte_eth_dev_stop(self.id);
            ffi::rte_eth_dev_close(self.id);
        }
    }
}

fn rss_hf_5tuple() -> u64 {
    // SAFETY: returns a constant.
    unsafe { ffi::shim_rss_hf_5tuple() }
}

fn rx_offload_ipv4_cksum() -> u64 {
    // SAFETY: returns a constant.
    unsafe { ffi::shim_rx_offload_ipv4_cksum() }
}

const fn libc_enotsup() -> i32 {
    95 // ENOTSUP on Linux
}

/// One worker's view of one RX queue. Not shared between lcores: polling
/// takes `&mut self`, and the handle is not `Clone`.
pub struct RxQueue {
    port: u16,
    queue: u16,
}

impl RxQueue {
    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Receives up to `max` packets into `out[..n]` and returns n. The
    /// slots must be empty (a packet left in one would be leaked, never
    /// freed twice): DPDK writes the pointers straight into them.
    #[inline]
    pub fn rx_burst_into(&mut self, max: usize, out: &mut [Option<Mbuf>; MAX_BURST]) -> usize {
        let max = max.min(MAX_BURST);
        debug_assert!(out[..max].iter().all(Option::is_none), "rx_burst_into: slots must be empty");
        // SAFETY: `out` has room for `max` pointers, and an `Option<Mbuf>` is
        // laid out as a `*mut rte_mbuf` (Mbuf is repr(transparent) over
        // NonNull; asserted above). DPDK writes n non-null pointers to mbufs
        // it hands over: each slot becomes `Some`, owning its mbuf. This queue
        // is polled by one lcore only.
        unsafe {
            ffi::shim_eth_rx_burst(self.port, self.queue, out.as_mut_ptr().cast::<*mut ffi::rte_mbuf>(), max as u16)
                as usize
        }
    }

    /// Receives up to `max` packets straight into `tx`'s buffer, for a wire
    /// that reads nothing of them: no per-packet handle, no second copy of
    /// the pointers. Sends when the buffer is full, and first if this burst
    /// might not fit.
    #[inline]
    pub fn relay_into(&mut self, max: usize, tx: &mut TxBuffer) -> Relayed {
        let (mut r, n) = self.rx_past(max, tx);
        tx.commit(n, &mut r);
        r
    }

    /// Receives up to `max` packets into `tx.pkts` past `tx.len` (sending
    /// the buffer first if they might not fit) without taking them into
    /// the buffer yet: returns what that send refused, and how many came.
    #[inline]
    fn rx_past(&mut self, max: usize, tx: &mut TxBuffer) -> (Relayed, usize) {
        let max = max.min(MAX_BURST);
        let mut r = Relayed::default();
        if tx.len + max > MAX_BURST {
            (r.refused, r.refused_bytes) = tx.flush();
        }
        // SAFETY: tx.pkts has room for `max` pointers past tx.len (flushed
        // above otherwise); this queue is polled by one lcore only.
        let n = unsafe { ffi::shim_eth_rx_burst(self.port, self.queue, tx.pkts.as_mut_ptr().add(tx.len), max as u16) }
            as usize;
        r.packets = n;
        (r, n)
    }
}

/// What one `RxQueue::relay_into` moved: received packets and bytes, and
/// what the TX side refused (freed, to be counted as drops).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Relayed {
    pub packets: usize,
    pub bytes: u64,
    pub refused: usize,
    pub refused_bytes: u64,
}

/// Per-worker TX buffer for one (port, queue): batches packets into bursts.
pub struct TxBuffer {
    port: u16,
    queue: u16,
    len: usize,
    pkts: [*mut ffi::rte_mbuf; MAX_BURST],
}

// SAFETY: a TxBuffer is moved to exactly one worker lcore and used only there.
unsafe impl Send for TxBuffer {}

impl TxBuffer {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Takes in the `n` packets received past `len` (see
    /// `RxQueue::rx_past`), counting their bytes into `r`; sends when full.
    #[inline]
    fn commit(&mut self, n: usize, r: &mut Relayed) {
        for &p in &self.pkts[self.len..self.len + n] {
            // SAFETY: one of the n valid mbufs DPDK just handed over, now owned here.
            r.bytes += unsafe { (*p).pkt_len } as u64;
        }
        self.len += n;
        if self.len == MAX_BURST {
            let (n, b) = self.flush();
            r.refused += n;
            r.refused_bytes += b;
        }
    }

    pub fn pending(&self) -> usize {
        self.len
    }

    /// Queues `m`; sends a full burst when the buffer fills. Returns the
    /// packets and bytes the device refused (freed, to be counted as drops).
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> (usize, u64) {
        self.pkts[self.len] = m.into_raw();
        self.len += 1;
        if self.len == MAX_BURST {
            self.flush()
        } else {
            (0, 0)
        }
    }

    /// Queues every packet of a received burst (the slots are emptied),
    /// sending as the buffer fills. Returns what the device refused, as push.
    #[inline]
    pub fn push_burst(&mut self, pkts: &mut [Option<Mbuf>]) -> (usize, u64) {
        let (mut n, mut b) = (0, 0);
        let mut rest = pkts;
        while !rest.is_empty() {
            if self.len == MAX_BURST {
                let (rn, rb) = self.flush();
                n += rn;
                b += rb;
            }
            // As many as fit (at least one: the buffer has room).
            let (now, later) = rest.split_at_mut(rest.len().min(MAX_BURST - self.len));
            let mut len = self.len;
            // (Counted rather than `all`: no early exit, so it vectorises.)
            if now.iter().filter(|m| m.is_some()).count() == now.len() {
                // A received burst: every slot full. Its pointers move as one copy.
                // SAFETY: an `Option<Mbuf>` is laid out as a `*mut rte_mbuf`
                // (asserted at Mbuf) and all of `now` are Some; pkts has room
                // for them past len. The slots are then overwritten with None
                // (null) without dropping: their mbufs now belong to the buffer.
                unsafe {
                    let src = now.as_mut_ptr().cast::<*mut ffi::rte_mbuf>();
                    std::ptr::copy_nonoverlapping(src, self.pkts.as_mut_ptr().add(len), now.len());
                    std::ptr::write_bytes(src, 0, now.len());
                }
                len += now.len();
            } else {
                for m in now.iter_mut().filter_map(Option::take) {
                    self.pkts[len] = m.into_raw();
                    len += 1;
                }
            }
            self.len = len;
            rest = later;
        }
        if self.len == MAX_BURST {
            let (rn, rb) = self.flush();
            n += rn;
            b += rb;
        }
        (n, b)
    }

    /// Sends the same buffer out of every TX buffer named by `targets`
    /// (refcount bumped once per extra copy); `refused(target, packets,
    /// bytes)` hears what each buffer could not send.
    pub fn push_flood(m: Mbuf, bufs: &mut [TxBuffer], targets: &[usize], mut refused: impl FnMut(usize, usize, u64)) {
        if targets.is_empty() {
            return; // dropping `m` frees it
        }
        let extra = targets.len() - 1;
        if extra > 0 {
            // SAFETY: we own one reference; adding `extra` makes one per target.
            unsafe { ffi::shim_mbuf_refcnt_update(m.raw(), extra as i16) };
        }
        let raw = m.into_raw();
        for &t in targets {
            // SAFETY: `raw` came from a live Mbuf (non-null); each push consumes
            // one of the references created above.
            let (n, b) = bufs[t].push(Mbuf(unsafe { NonNull::new_unchecked(raw) }));
            refused(t, n, b);
        }
    }

    /// Sends what is queued; retries a few times, then frees what the device
    /// still refuses. Returns the packets and bytes freed that way.
    #[inline]
    pub fn flush(&mut self) -> (usize, u64) {
        let mut sent = 0;
        let mut tries = 0;
        while sent < self.len && tries < 4 {
            // SAFETY: pkts[sent..len] are owned mbufs; this queue is used by one lcore only.
            sent += unsafe {
                ffi::shim_eth_tx_burst(
                    self.port,
                    self.queue,
                    self.pkts.as_mut_ptr().add(sent),
                    (self.len - sent) as u16,
                )
            } as usize;
            tries += 1;
        }
        let refused = self.len - sent;
        let mut bytes = 0u64;
        if refused > 0 {
            for &p in &self.pkts[sent..self.len] {
                // SAFETY: still owned by us; read the length before freeing.
                bytes += unsafe { (*p).pkt_len } as u64;
            }
            // SAFETY: the device did not take these; we still own them.
            unsafe { ffi::shim_pktmbuf_free_bulk(self.pkts.as_mut_ptr().add(sent), refused as u32) };
        }
        self.len = 0;
        (refused, bytes)
    }
}

impl Drop for TxBuffer {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: pending mbufs are owned by the buffer.
            unsafe { ffi::shim_pktmbuf_free_bulk(self.pkts.as_mut_ptr(), self.len as u32) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_rate_follows_the_monotonic_clock() {
        let hz = tsc_hz();
        assert!(hz > 100_000_000, "{hz}");
        // A second, longer measurement agrees to 0.01 % (2 us in 20 ms; the
        // EAL's 10 MHz rounding is up to 0.2 % off at 2.5 GHz).
        let again = measure_tsc_hz(std::time::Duration::from_millis(200));
        assert!(hz.abs_diff(again) * 10_000 <= again, "{hz} vs {again}");
    }

    #[test]
    fn eal_args_render() {
        let a = EalArgs {
            program: "intswitch".into(),
            lcores: "0-1".into(),
            memory_mb: Some(512),
            no_huge: true,
            huge_unlink: true,
            no_pci: true,
            file_prefix: Some("t1".into()),
            vdevs: vec!["net_null0".into()],
            allow: vec![],
            log_level: Some("notice".into()),
            extra: vec![],
        };
        assert_eq!(
            a.to_argv(),
            [
                "intswitch",
                "-l",
                "0-1",
                "-m",
                "512",
                "--no-huge",
                "--no-pci",
                "--file-prefix=t1",
                "--vdev=net_null0",
                "--log-level=notice"
            ]
        );
        let huge = EalArgs { no_huge: false, memory_mb: None, vdevs: vec![], log_level: None, ..a };
        assert_eq!(huge.to_argv(), ["intswitch", "-l", "0-1", "--huge-unlink", "--no-pci", "--file-prefix=t1"]);
    }
}
